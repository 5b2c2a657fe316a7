"""Contiguity hints: tell the compiler that block offsets start at a multiple of the block and run contiguously.

For ``offs = pid * BLOCK + tl.arange(0, BLOCK)`` (either order) both facts hold by construction, so
``offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)`` is always true and lets the
compiler emit the widest vector loads even when it cannot see through the arithmetic. Offered only
for that exact shape, and only once per name.

Example: kernel=copy_kernel target=h100 params={"name": "offs"}

```python before
@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
```

```python after
@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
```
"""

from __future__ import annotations

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit
from .single_pass import _single_assign


def _arange_block(node: cst.BaseExpression, roots: frozenset[str]) -> tuple[str, str] | None:
    """``tl.arange(0, B)`` -> (B, "tl"), however the file names triton.language (``tl2.arange``, ...)."""
    if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "arange"
            and c.code(node.func.value) in roots and len(node.args) == 2 and c.code(node.args[0].value) == "0"):
        return c.code(node.args[1].value), c.code(node.func.value)
    return None


def _block_offsets(value: cst.BaseExpression, blocks: set[str], roots: frozenset[str]) -> tuple[str, str] | None:
    """``X * B + tl.arange(0, B)`` (or the sum reversed, or ``B * X``) -> (B, the language module's name)."""
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)):
        return None
    for product, arange in ((value.left, value.right), (value.right, value.left)):
        found = _arange_block(arange, roots)
        if found and found[0] in blocks and isinstance(product, cst.BinaryOperation) and isinstance(product.operator, cst.Multiply):
            if found[0] in (c.code(product.left), c.code(product.right)):
                return found
    return None


def _sites(kdef: cst.FunctionDef, kernel: Kernel, roots: frozenset[str]) -> list[tuple[str, str, cst.BaseStatement, str]]:
    """(name, block, its statement, the language module's name as written there) for each offsets line."""
    blocks = set(kernel.constexpr_names)
    hinted = "multiple_of" in c.code(kdef.body) or "max_contiguous" in c.code(kdef.body)
    out = []
    for statement in kdef.body.body:
        single = _single_assign(statement)
        if single and not hinted:
            found = _block_offsets(single[1], blocks, roots)
            if found:
                out.append((single[0], found[0], statement, found[1]))
    return out


class Contiguity:
    name = "contiguity"
    kind = "Reordering"
    changes_numerics = False
    keeps_interface = True  # launchers in other modules keep working (see actions.applicable)

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        kdef, _ = c.locate(c.parse(analysis.text), kernel.name)
        line = kernel.calls_of("arange")[0].span.start.line if kernel.calls_of("arange") else c.kernel_line(kernel)
        return [Candidate(self.name, self.kind, kernel.name, {"name": name},
                          f"Add contiguity hints to `{name}` (multiple of {block}, {block} contiguous)", line)
                for name, block, _s, _tl in _sites(kdef, kernel, c.language_roots(analysis))]

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        kdef, _ = c.locate(c.parse(analysis.text), kernel.name)
        if "multiple_of" in c.code(kdef.body) or "max_contiguous" in c.code(kdef.body):
            return "the kernel already has contiguity hints"
        return None if _sites(kdef, kernel, c.language_roots(analysis)) else \
            "no top-level offsets line of the form pid * BLOCK + tl.arange(0, BLOCK)"

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        module = c.parse(text)
        kdef, _ = c.locate(module, kernel.name)
        hits = [s for s in _sites(kdef, kernel, c.language_roots(analysis)) if s[0] == params.get("name")]
        if len(hits) != 1:
            raise ActionError(f"`{params.get('name')}` is not `pid * BLOCK + tl.arange(0, BLOCK)` in {kernel.name}")
        name, block, statement, tl = hits[0]
        # The hint spells triton.language as the offsets line does (``tl2.max_contiguous``).
        hint = c.stmt(f"{name} = {tl}.max_contiguous({tl}.multiple_of({name}, {block}), {block})\n")
        module = c.replace_all(module, [(statement, cst.FlattenSentinel([statement, hint]))])
        return c.finish(text, module, f"contiguity hints on {name} in {kernel.name}")


ACTION = Contiguity()
