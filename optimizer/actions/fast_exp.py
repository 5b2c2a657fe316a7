"""Fast exponent: ``tl.exp`` in a loop that also multiplies tiles becomes ``tl.math.exp2`` of the value times log2(e).

``tl.exp(x)`` on fp32 compiles to ``ex2.approx.f32`` of ``x * log2(e)``, the form that keeps denormal
results, which costs extra instructions per element; ``tl.math.exp2`` compiles to the flush-to-zero
``ex2.approx.ftz.f32``. Where the exponent sits next to a ``tl.dot`` in a loop (attention's online
softmax: one exponent per score) the special-function work is on the critical path: on an H200, the
flash kernel of a 4x16x4096x128 fp16 attention ran 1.68 ms with ``tl.exp`` and 1.28 ms in base 2
(``benchmarks/results/h200/suite_tiles``). The results are equal except where ``exp(x)`` is below about
1e-38, which becomes 0; Triton's attention tutorial works in base 2 for the same reason. Offered for
kernels with at least one ``tl.exp`` inside a loop that also calls ``tl.dot`` (elsewhere the exponent
is not what limits the kernel), every such call rewritten in one step.

Example: kernel=attn_kernel target=h100 params={}

```python before
@triton.jit
def attn_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n, D: tl.constexpr, BLOCK: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.full((BLOCK,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK,), tl.float32)
    acc = tl.zeros((BLOCK, D), tl.float32)
    for start in range(0, n, BLOCK):
        offs_n = start + tl.arange(0, BLOCK)
        k = tl.load(k_ptr + offs_n[:, None] * D + offs_d[None, :])
        s = tl.dot(q, tl.trans(k))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + offs_n[:, None] * D + offs_d[None, :])
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    tl.store(o_ptr + offs_m[:, None] * D + offs_d[None, :], acc / l_i[:, None])
```

```python after
@triton.jit
def attn_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n, D: tl.constexpr, BLOCK: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.full((BLOCK,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK,), tl.float32)
    acc = tl.zeros((BLOCK, D), tl.float32)
    for start in range(0, n, BLOCK):
        offs_n = start + tl.arange(0, BLOCK)
        k = tl.load(k_ptr + offs_n[:, None] * D + offs_d[None, :])
        s = tl.dot(q, tl.trans(k))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2((s - m_new[:, None]) * 1.4426950408889634)
        alpha = tl.math.exp2((m_i - m_new) * 1.4426950408889634)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + offs_n[:, None] * D + offs_d[None, :])
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    tl.store(o_ptr + offs_m[:, None] * D + offs_d[None, :], acc / l_i[:, None])
```
"""

from __future__ import annotations

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit


def _language_call(node: cst.CSTNode, roots: frozenset[str], names: tuple[str, ...]) -> bool:
    """``tl.<name>(...)`` or ``tl.math.<name>(...)``, however the file spells triton.language."""
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in names):
        return False
    base = c.code(node.func.value)
    return base in roots or base in {f"{r}.math" for r in roots}


def _exps_beside_dots(kdef: cst.FunctionDef, roots: frozenset[str]) -> list[cst.Call]:
    """Every one-argument ``tl.exp`` call inside a loop whose body also calls ``tl.dot``."""
    found: list[cst.Call] = []

    class Loops(cst.CSTVisitor):
        def visit_For(self, node: cst.For) -> bool:
            calls = c.calls_in(node.body)
            if any(_language_call(call, roots, ("dot",)) for call in calls):
                found.extend(call for call in calls if _language_call(call, roots, ("exp",)) and len(call.args) == 1
                             and call.args[0].keyword is None and call not in found)
            return True

    kdef.body.visit(Loops())
    return found




class FastExp:
    name = "fast_exp"
    kind = "Precision"  # an instruction choice, not a change of the kernel's structure
    changes_numerics = False  # equal but for results under ~1e-38, which flush to zero
    keeps_interface = True

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        if not kernel.calls_of("exp") or not kernel.calls_of("dot"):
            return []
        kdef, _ = c.locate(c.parse(analysis.text), kernel.name)
        sites = _exps_beside_dots(kdef, c.language_roots(analysis))
        if not sites:
            return []
        line = next((call.span.start.line for call in kernel.calls_of("exp") if call.loop_depth > 0), c.kernel_line(kernel))
        return [Candidate(self.name, self.kind, kernel.name, {},
                          f"Compute the {len(sites)} exponent(s) beside tl.dot in base 2 (tl.math.exp2: the flush-to-zero "
                          f"ex2.approx.ftz)", line)]

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        if self.candidates(analysis, kernel, target):
            return None
        return "no tl.exp inside a loop that also calls tl.dot"

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        if params:
            raise ActionError(f"fast_exp takes no parameters (got {c.fmt_params(params)})")
        module = c.parse(text)
        kdef, _ = c.locate(module, kernel.name)
        sites = _exps_beside_dots(kdef, c.language_roots(analysis))
        if not sites:
            raise ActionError(f"{kernel.name} has no tl.exp inside a loop that also calls tl.dot")
        pairs = []
        for call in sites:
            func = call.func
            root = func.value if c.code(func.value) in c.language_roots(analysis) else func.value.value  # tl.math -> tl
            exp2 = cst.Attribute(cst.Attribute(root, cst.Name("math")), cst.Name("exp2"))
            pairs.append((call, call.with_changes(func=exp2, args=[call.args[0].with_changes(value=c.times_log2e(call.args[0].value))])))
        module = c.replace_all(module, pairs)
        return c.finish(text, module, f"{len(sites)} exponent(s) of {kernel.name} in base 2 (tl.math.exp2)",
                        ["exp(x) = exp2(x * log2(e)); results under about 1e-38 flush to zero"])


ACTION = FastExp()
