"""Precision (changes numerics; offered only on request): faster ``tl.dot`` inputs for fp32 data.

``tf32``: an fp32 ``tl.dot`` pinned to IEEE precision uses TF32 tensor cores
(``input_precision="tf32"``: 10-bit mantissa inputs, fp32 accumulation). ``fp16``: the fp32 tiles
are cast to fp16 before the dot, which still accumulates in fp32. Both change results in the
third or fourth significant digit.

Example: kernel=mm_kernel target=h100 params={"mode": "tf32", "line": 10}

```python before
@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
    b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :])
    c = tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], c)


def mm(a, b):
    c = torch.empty((32, 32), device=a.device, dtype=torch.float32)
    mm_kernel[(1,)](a, b, c, BLOCK=32)
    return c
```

```python after
@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
    b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :])
    c = tl.dot(a, b, input_precision="tf32")
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], c)


def mm(a, b):
    c = torch.empty((32, 32), device=a.device, dtype=torch.float32)
    mm_kernel[(1,)](a, b, c, BLOCK=32)
    return c
```
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit


class _Dots(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, kernel: str):
        self.kernel, self.inside, self.found = kernel, 0, []

    def visit_FunctionDef(self, node):
        self.inside += node.name.value == self.kernel

    def leave_FunctionDef(self, original_node):
        self.inside -= original_node.name.value == self.kernel

    def visit_Call(self, node):
        if self.inside and c.code(node.func) == "tl.dot" and len([a for a in node.args if a.keyword is None]) == 2:
            self.found.append((self.get_metadata(PositionProvider, node).start.line - 1, node))


def _modes(call: cst.Call, fp32_file: bool) -> list[str]:
    modes = []
    if c.exact_dot(call):
        modes.append("tf32")
    a, b = (x.value for x in call.args[:2])
    if fp32_file and not any(".to(" in c.code(x) for x in (a, b)):
        modes.append("fp16")
    return modes


class Precision:
    name = "precision"
    kind = "Precision"
    changes_numerics = True

    def _dots(self, text: str, kernel: str):
        wrapper = MetadataWrapper(c.parse(text), unsafe_skip_copy=True)
        visitor = _Dots(kernel)
        wrapper.visit(visitor)
        return wrapper.module, visitor.found

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        if not target.has("tf32") or not kernel.calls_of("dot"):
            return []
        fp32 = c.element_bytes(analysis.text) == 4
        pinned = any("input_precision" in d.kwargs or "allow_tf32" in d.kwargs for d in kernel.calls_of("dot"))
        if not fp32 and not pinned:
            return []
        _m, dots = self._dots(analysis.text, kernel.name)
        out = []
        for line, call in dots:
            for mode in _modes(call, fp32):
                label = "TF32 inputs" if mode == "tf32" else "fp16 inputs, fp32 accumulation"
                out.append(Candidate(self.name, self.kind, kernel.name, {"mode": mode, "line": line},
                                     f"Lower tl.dot precision at line {line + 1} to {label} on {target.key.upper()} (changes numerics)",
                                     line, changes_numerics=True))
        return out

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        mode = params.get("mode")
        module, dots = self._dots(text, kernel.name)
        hits = [call for line, call in dots if line == params.get("line")]
        if len(hits) != 1:
            raise ActionError(f"no tl.dot in {kernel.name} at line {params.get('line')}")
        call = hits[0]
        if mode not in _modes(call, c.element_bytes(text) == 4):
            raise ActionError(f"mode {mode!r} does not apply to this tl.dot")
        if mode == "tf32":
            new = c.remove_kwargs(call, {"allow_tf32"})
            new = c.set_kwarg(new, "input_precision", c.expr('"tf32"'))
        else:
            args = list(call.args)
            for i in (0, 1):
                args[i] = args[i].with_changes(value=c.expr(f"{c.code(args[i].value)}.to(tl.float16)"))
            new = c.remove_kwargs(call.with_changes(args=args), {"input_precision", "allow_tf32"})
        module = c.replace_all(module, [(call, new)])
        return c.finish(text, module, f"tl.dot precision -> {mode} in {kernel.name}", ["changes numerics"])


ACTION = Precision()
