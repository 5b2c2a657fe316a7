"""Use ``tl.dot``: a tile product written as broadcast multiply and ``tl.sum`` runs on tensor cores instead.

``tl.sum(a[:, :, None] * b[None, :, :], axis=1)`` is exactly ``tl.dot(a, b)``. In fp32 files the dot
keeps IEEE precision (``input_precision="ieee"``) so the numbers do not change; the precision
action can relax that later. Operands that are loads cast to fp32 only for the product
(``b_x = tl.load(...).to(tl.float32)``) lose the cast: the dot of the 16-bit values is exact
in its fp32 accumulator and runs on their own tensor cores. Offered only when every block size is at least 16 (``tl.dot``'s
minimum tile).

Example: kernel=mm_kernel target=h100 params={"line": 10}

```python before
@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
    b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :])
    c = tl.sum(a[:, :, None] * b[None, :, :], axis=1)
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
    c = tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], c)


def mm(a, b):
    c = torch.empty((32, 32), device=a.device, dtype=torch.float32)
    mm_kernel[(1,)](a, b, c, BLOCK=32)
    return c
```
"""

from __future__ import annotations

import re

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit

MIN_DOT = 16


def _expanded(node: cst.BaseExpression, pattern: tuple[str, ...]) -> str | None:
    """``x[:, :, None]`` matching ``(":", ":", "None")`` -> ``"x"`` (only a plain name)."""
    if not (isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and len(node.slice) == 3):
        return None
    parts = tuple(c.code(s.slice).strip() for s in node.slice)
    return node.value.value if parts == pattern else None


def match_sum_product(call: cst.Call) -> tuple[str, str] | None:
    """``tl.sum(a[:, :, None] * b[None, :, :], axis=1)`` -> ("a", "b")."""
    if c.code(call.func) != "tl.sum" or not call.args:
        return None
    axis = c.kwarg(call, "axis")
    positional = [a for a in call.args if a.keyword is None]
    axis_value = c.code(axis.value) if axis else c.code(positional[1].value) if len(positional) > 1 else None
    if axis_value != "1" or len(call.args) != 2 or (axis is None and len(positional) != 2):
        return None
    product = positional[0].value
    if not (isinstance(product, cst.BinaryOperation) and isinstance(product.operator, cst.Multiply)):
        return None
    a = _expanded(product.left, (":", ":", "None"))
    b = _expanded(product.right, ("None", ":", ":"))
    return (a, b) if a and b else None


class _Sites(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, kernel: str):
        self.kernel = kernel
        self.inside = 0
        self.found: list[tuple[int, cst.Call, str, str]] = []

    def visit_FunctionDef(self, node):
        self.inside += node.name.value == self.kernel

    def leave_FunctionDef(self, original_node):
        self.inside -= original_node.name.value == self.kernel

    def visit_Call(self, node):
        if self.inside:
            hit = match_sum_product(node)
            if hit:
                self.found.append((self.get_metadata(PositionProvider, node).start.line - 1, node, *hit))


# ``a[:, :, None]``: without such a 3-D broadcast in the kernel there is no tile product (and no need to walk
# the whole module with positions, the costly part of a code-action request).
_THREE_D = re.compile(r"\[\s*:\s*,\s*:\s*,\s*None\s*\]")


def _sites(text: str, kernel: str):
    wrapper = MetadataWrapper(c.parse(text), unsafe_skip_copy=True)
    sites = _Sites(kernel)
    wrapper.visit(sites)
    return wrapper.module, sites.found


class UseDot:
    name = "use_dot"
    kind = "TensorCore"
    changes_numerics = False
    keeps_interface = True  # launchers in other modules keep working (see actions.applicable)

    def _check_blocks(self, analysis: FileAnalysis, kernel: Kernel) -> None:
        sites = analysis.launches_of(kernel.name)
        if not sites:
            raise ActionError("no launch to read the block sizes from")
        for site in sites:
            values = site.constexpr_values(kernel)
            for p in kernel.constexpr_names:
                if c.is_block_name(p) and not (isinstance(values.get(p), int) and values[p] >= MIN_DOT):
                    raise ActionError(f"{p} is not known to be at least {MIN_DOT} (tl.dot's minimum)")

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        if not kernel.calls_of("sum") or not _THREE_D.search(kernel.def_span.text(analysis.text)):
            return []
        try:
            self._check_blocks(analysis, kernel)
        except ActionError:
            return []
        _module, found = _sites(analysis.text, kernel.name)
        return [Candidate(self.name, self.kind, kernel.name, {"line": line},
                          f"Use tl.dot({a}, {b}) for the tile product at line {line + 1} (tensor cores)", line)
                for line, _call, a, b in found]

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        if not kernel.calls_of("sum") or not _sites(analysis.text, kernel.name)[1]:
            return "no tl.sum(a[:, :, None] * b[None, :, :], axis=1) tile product"
        try:
            self._check_blocks(analysis, kernel)
        except ActionError as exc:
            return str(exc)
        return None

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        self._check_blocks(analysis, kernel)
        module, found = _sites(text, kernel.name)
        hits = [f for f in found if f[0] == params.get("line")]
        if len(hits) != 1:
            raise ActionError(f"no `tl.sum(a[:, :, None] * b[None, :, :], axis=1)` in {kernel.name} at line {params.get('line')}")
        _line, call, a, b = hits[0]
        kdef, _launches = c.locate(module, kernel.name)
        upcasts = [_upcast_load(kdef, name, c.language_roots(analysis)) for name in (a, b)]
        pairs: list[tuple[cst.CSTNode, object]] = []
        if all(upcasts):
            # ``b_x = tl.load(...).to(tl.float32)``: the product of two such tiles is the dot of the loaded values,
            # which every 16-bit type multiplies exactly into an fp32 accumulator, on the tensor cores of its own
            # type; an fp32 load is unchanged by the cast and takes tl.dot's default, as it would have after it.
            pairs += [(assign.value, assign.value.func.value) for assign in upcasts]
            precision = ""
        else:
            precision = ', input_precision="ieee"' if c.element_bytes(text) == 4 else ""
        module = c.replace_all(module, [*pairs, (call, c.expr(f"tl.dot({a}, {b}{precision})"))])
        loaded = " (on the loaded values, without their fp32 casts)" if pairs else ""
        return c.finish(text, module, f"tl.dot({a}, {b}) in {kernel.name}{loaded}")


def _upcast_load(kdef: cst.FunctionDef, name: str, roots: frozenset[str]) -> cst.Assign | None:
    """``name = tl.load(...).to(tl.float32)``, assigned once and read only by the tile product (the assignment
    and the one read are its two uses); None otherwise."""
    assign = c.any_assignment(kdef, name)
    if assign is None or c.count_name(kdef, name) != 2:
        return None
    value = assign.value
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to"
            and len(value.args) == 1 and value.args[0].keyword is None):
        return None
    target = c.code(value.args[0].value)
    if target not in {f"{root}.float32" for root in roots}:
        return None
    return assign if c.is_call(value.func.value, "load", roots) else None


ACTION = UseDot()
