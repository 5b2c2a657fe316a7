"""Contiguity hints: tell the compiler that block offsets start at a multiple of the block and run contiguously.

For offsets whose value is a whole multiple of ``BLOCK`` plus ``tl.arange(0, BLOCK)`` both facts hold by
construction, so ``offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)`` is always true and lets the
compiler emit the widest vector loads even when it cannot see through the arithmetic. The kernel model
(analysis/kernel_model.py) decides it from the value, however it is spelled: ``pid * BLOCK + tl.arange(0, BLOCK)``,
``start = pid * BLOCK`` then ``start + tl.arange(0, BLOCK)``, ``(pid + 1) * BLOCK - BLOCK + ...``. Offered for
names bound once at the top of the body, when the kernel has no hints yet.

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
import sympy as sp

from ..analysis import FileAnalysis, Kernel
from ..analysis.kernel_model import kernel_model
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit


def _whole_blocks(expr: sp.Expr, block: sp.Expr) -> bool:
    """``expr`` is an integer multiple of ``block`` for every value of its (integer) symbols."""
    # floor, Mod, min and max of integers are integers: atoms of the polynomial test.
    atoms = {f: sp.Dummy(integer=True) for f in expr.atoms(sp.floor, sp.ceiling, sp.Mod, sp.Min, sp.Max)}
    quotient = sp.expand(sp.cancel(sp.expand(expr.xreplace(atoms)) / block))
    return quotient == 0 or (quotient.is_polynomial(*quotient.free_symbols) and all(
        term.as_coeff_Mul()[0].is_Integer for term in sp.Add.make_args(quotient)))


def _sites(analysis: FileAnalysis, kernel: Kernel) -> list[tuple[str, str, int, str]]:
    """(name, block, the line binding it, the spelling of triton.language there) for each hintable offsets name."""
    if kernel.calls_of("multiple_of", "max_contiguous"):
        return []
    model = kernel_model(analysis, kernel)
    out = []
    for name in model.bindings:
        binding = model.single_binding(name)
        # tl.multiple_of / max_contiguous take one value per dimension: a [:, None] tile is not this hint's
        if binding is None or not binding.top_level or binding.expr is None or binding.rank > 1:
            continue
        axes = [s for s in binding.expr.free_symbols if s in model.aranges]
        if len(axes) != 1:
            continue
        arange = model.aranges[axes[0]]
        block = arange.size
        if arange.start != 0 or not (block.is_Symbol and model.params.get(block.name) == block or block.is_Integer):
            continue
        rest = binding.expr - arange.symbol
        if sp.diff(rest, arange.symbol) != 0 or not model.reads_program_id(rest) or not _whole_blocks(rest, block):
            continue
        spelled = next((call.qualname.rsplit(".", 1)[0] for call in kernel.calls_of("arange")
                        if call.span.start.line == arange.line), None)
        if spelled:
            out.append((name, str(block), binding.line, spelled))
    return out


class Contiguity:
    name = "contiguity"
    kind = "Reordering"
    changes_numerics = False
    keeps_interface = True  # launchers in other modules keep working (see actions.applicable)

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        return [Candidate(self.name, self.kind, kernel.name, {"name": name},
                          f"Add contiguity hints to `{name}` (multiple of {block}, {block} contiguous)", line)
                for name, block, line, _tl in _sites(analysis, kernel)]

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        if kernel.calls_of("multiple_of", "max_contiguous"):
            return "the kernel already has contiguity hints"
        return None if _sites(analysis, kernel) else \
            "no name bound once at the top to whole blocks plus tl.arange(0, BLOCK) (pid * BLOCK + tl.arange(0, BLOCK))"

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        hits = [s for s in _sites(analysis, kernel) if s[0] == params.get("name")]
        if len(hits) != 1:
            raise ActionError(f"`{params.get('name')}` is not whole blocks plus tl.arange(0, BLOCK) in {kernel.name}")
        name, block, line, tl = hits[0]
        module = c.parse(text)
        kdef, _ = c.locate(module, kernel.name)
        position = cst.metadata.MetadataWrapper(module, unsafe_skip_copy=True).resolve(cst.metadata.PositionProvider)
        statement = next(s for s in kdef.body.body if position[s].start.line - 1 == line)
        # The hint spells triton.language as the offsets line does (``tl2.max_contiguous``).
        hint = c.stmt(f"{name} = {tl}.max_contiguous({tl}.multiple_of({name}, {block}), {block})\n")
        module = c.replace_all(module, [(statement, cst.FlattenSentinel([statement, hint]))])
        return c.finish(text, module, f"contiguity hints on {name} in {kernel.name}")


ACTION = Contiguity()
