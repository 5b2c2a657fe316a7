"""Channel tile: a program that walks a channel axis one vector at a time loads all channels as one 2-D tile.

Norms over dim 1 of a ``[B, C, H, W]`` tensor (KernelBench's RMS norm, a mean over channels) are often
written with a program per vector of ``BLOCK_S`` positions and a loop ``for c in range(0, C)`` that loads
one vector per channel, usually twice: statistics first, then the output. Each iteration waits for its
load, and the second pass reads the input again. The launch instead passes ``BLOCK_C =
triton.next_power_of_2(C)`` and every such loop becomes straight-line code on a ``[BLOCK_C, BLOCK_S]``
tile: ``c`` becomes ``offs_c[:, None]``, the position vectors ``v[None, :]``, each mask gains
``mask_c[:, None]``, an accumulation ``acc += e`` becomes ``acc += tl.sum(e, axis=0)`` (``e`` masked with
``tl.where`` unless the padded channels provably add zeros: a load with ``other=0`` times anything
loaded; in a file that handles half precision the tile is cast to an fp32 accumulator's type first, as each
vector was when added to it), and a load the second pass repeats reuses the first pass's tile (three
passes over memory become two). The tile is kept at most ``TILE_BUDGET`` elements: the host caps ``BLOCK_S`` at
``TILE_BUDGET // BLOCK_C`` and the grid, which divides by the block, follows it.
Refused (with the reason) when a loop holds other control flow, a reduction, a load or a store whose
address is not affine in ``c``, an accumulation that is not a sum, or a value carried from one
iteration to the next; when the launch's block is not a literal, a default or a host constant that the grid
(inline, a ``grid = ...`` of this launch, or a ``meta`` lambda) divides by; when the kernel is autotuned or
launched more than once.

Example: kernel=rms_kernel target=h100 params={}

```python before
@triton.jit
def rms_kernel(x_ptr, y_ptr, C, S, eps, BLOCK_S: tl.constexpr):
    offs = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    mask = offs < S
    base = tl.program_id(0) * C * S
    acc = tl.zeros([BLOCK_S], dtype=tl.float32)
    for c in range(0, C):
        x = tl.load(x_ptr + base + c * S + offs, mask=mask, other=0.0)
        acc += x * x
    rms = tl.sqrt(acc / C + eps)
    for c in range(0, C):
        x = tl.load(x_ptr + base + c * S + offs, mask=mask, other=0.0)
        tl.store(y_ptr + base + c * S + offs, x / rms, mask=mask)


def rms_norm(x):
    y = torch.empty_like(x)
    B, C, S = x.shape[0], x.shape[1], x[0, 0].numel()
    rms_kernel[(B, triton.cdiv(S, 256))](x, y, C, S, 1e-5, BLOCK_S=256)
    return y
```

```python after
@triton.jit
def rms_kernel(x_ptr, y_ptr, C, S, eps, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    offs = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    mask = offs < S
    base = tl.program_id(0) * C * S
    acc = tl.zeros([BLOCK_S], dtype=tl.float32)
    offs_c = tl.arange(0, BLOCK_C)
    mask_c = offs_c < C
    x = tl.load(x_ptr + base + offs_c[:, None] * S + offs[None, :], mask=mask_c[:, None] & mask[None, :], other=0.0)
    acc += tl.sum(x * x, axis=0)
    rms = tl.sqrt(acc / C + eps)
    tl.store(y_ptr + base + offs_c[:, None] * S + offs[None, :], x / rms[None, :], mask=mask_c[:, None] & mask[None, :])


def rms_norm(x):
    y = torch.empty_like(x)
    B, C, S = x.shape[0], x.shape[1], x[0, 0].numel()
    BLOCK_C = triton.next_power_of_2(C)
    BLOCK_S = min(256, max(1, 8192 // BLOCK_C))
    rms_kernel[(B, triton.cdiv(S, BLOCK_S))](x, y, C, S, 1e-5, BLOCK_S=BLOCK_S, BLOCK_C=BLOCK_C)
    return y
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit
from .column_block import _insert_param, _kwarg_before_options, _plain
from .single_pass import _single_assign, dedupe

CHANNEL_PARAM = "BLOCK_C"
# Elements of one program's [BLOCK_C, BLOCK_S] tile: 64 fp32 registers a thread over 4 warps, the bound
# column_block's measured tiles keep (a whole tile stays live from the statistics pass to the output pass).
TILE_BUDGET = 8192
# Elementwise functions of triton.language: the same result per element whatever the tile's shape.
_ELEMENTWISE = frozenset({
    "abs", "sqrt", "sqrt_rn", "rsqrt", "exp", "exp2", "log", "log2", "sin", "cos", "erf", "floor", "ceil",
    "sigmoid", "maximum", "minimum", "where", "fma", "div_rn", "fdiv", "clamp", "cast",
})
_HALF = re.compile(r"float16|bfloat16|\bhalf\b|\bfp16\b|\bbf16\b")
_REDUCTIONS = frozenset({"sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum"})
_COMPOUND = (cst.If, cst.While, cst.For, cst.With, cst.Try, cst.FunctionDef, cst.ClassDef)

# A shape is (reads the channel, reads the position vector): (False, False) a scalar, (False, True) a
# [BLOCK_S] vector, (True, False) a per-channel [BLOCK_C, 1] column, (True, True) a [BLOCK_C, BLOCK_S] tile.
Shape = tuple[bool, bool]
SCALAR: Shape = (False, False)
ROW: Shape = (False, True)


def _join(*shapes: Shape) -> Shape:
    return (any(s[0] for s in shapes), any(s[1] for s in shapes))


@dataclass
class _Loop:
    node: cst.For
    var: str
    locals: dict[str, Shape] = field(default_factory=dict)  # names the body assigns -> their shape
    rows: set[str] = field(default_factory=set)  # outer names the body reads that hold a [BLOCK_S] vector
    sums: list[tuple[cst.CSTNode, str, cst.BaseExpression]] = field(default_factory=list)  # (small statement, acc, summed)


@dataclass
class _Plan:
    kdef: cst.FunctionDef
    launch: c.LaunchNode
    launch_line: cst.SimpleStatementLine
    tl: str
    triton: str
    block: str  # the position block (BLOCK_S)
    block_value: int  # what the launch sets it to
    channels: str  # the kernel's channel count (C)
    channels_source: str  # what the launch passes for it
    loops: list[_Loop]
    zero_sums: set[int]  # id of each summed expression whose padded channels are provably zero
    names: dict[str, str]  # fresh kernel names: offs_c, mask_c
    grid_sites: list  # grid literals that repeat the block (empty for a grid that reads meta[block] or the host's name)
    host_at: cst.SimpleStatementLine  # the host lines go before this statement (the launch or its `grid = ...`)
    host_var: str | None  # the host constant that sets the block, reassigned capped (None: a literal or default)
    widen: dict[str, str] = field(default_factory=dict)  # accumulator -> the fp32 its summed tiles are cast to


def _tl_func(node: cst.BaseExpression, tl_roots: frozenset[str]) -> str | None:
    """``exp`` for ``tl.exp(...)`` / ``tl.math.exp(...)``; None for any other call."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return None
    root = c.code(node.func.value)
    if root in tl_roots or root in {f"{r}.math" for r in tl_roots}:
        return node.func.attr.value
    return None


def _address(call: cst.Call) -> cst.BaseExpression:
    """The address argument of a ``tl.load`` / ``tl.store`` call."""
    positional = [a for a in call.args if a.keyword is None]
    if any(a.star for a in call.args) or not positional:
        raise ActionError("a load or store passes its arguments with * or **")
    return positional[0].value


class _Shapes:
    """Shapes of expressions in the kernel: outer names, the loop variable and the loop's own names."""

    def __init__(self, kernel: Kernel, tl_roots: frozenset[str], block: str):
        self.kernel = kernel
        self.tl_roots = tl_roots
        self.block = block
        self.outer: dict[str, Shape | None] = {p.name: SCALAR for p in kernel.params}

    def outer_shape(self, node: cst.BaseExpression) -> Shape | None:
        """The shape of a statement outside the loops (None when this action cannot tell)."""
        try:
            return self._shape(node, None, {})
        except ActionError:
            return None

    def _shape(self, node: cst.BaseExpression, loop: _Loop | None, local: dict[str, Shape]) -> Shape:
        if isinstance(node, cst.Name):
            if loop is not None and node.value == loop.var:
                return (True, False)
            if node.value in local:
                return local[node.value]
            if node.value in ("True", "False", "None"):
                return SCALAR
            shape = self.outer.get(node.value)
            if shape is None:
                raise ActionError(f"cannot tell the shape of {node.value}")
            return shape
        if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
            return SCALAR
        if isinstance(node, cst.BinaryOperation):
            return _join(self._shape(node.left, loop, local), self._shape(node.right, loop, local))
        if isinstance(node, cst.UnaryOperation):
            return self._shape(node.expression, loop, local)
        if isinstance(node, cst.BooleanOperation):
            return _join(self._shape(node.left, loop, local), self._shape(node.right, loop, local))
        if isinstance(node, cst.Comparison):
            return _join(self._shape(node.left, loop, local),
                         *(self._shape(t.comparator, loop, local) for t in node.comparisons))
        if isinstance(node, cst.Attribute):
            root = node
            while isinstance(root, cst.Attribute):
                root = root.value
            if isinstance(root, cst.Name) and (root.value in self.tl_roots or self.kernel.param(root.value) is not None):
                return SCALAR  # tl.float32, y_ptr.dtype.element_ty
            raise ActionError(f"cannot tell the shape of {c.code(node)}")
        if isinstance(node, cst.Call):
            return self._call_shape(node, loop, local)
        raise ActionError(f"`{c.code(node)}` is not elementwise arithmetic")

    def _call_shape(self, node: cst.Call, loop: _Loop | None, local: dict[str, Shape]) -> Shape:
        func = _tl_func(node, self.tl_roots)
        positional = [a.value for a in node.args if a.keyword is None]
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in c.SHAPE_METHODS and func is None:
            return self._shape(node.func.value, loop, local)  # x.to(tl.float32)
        if isinstance(node.func, cst.Name) and node.func.value == "float" and len(positional) == 1 \
                and isinstance(positional[0], cst.SimpleString):
            return SCALAR  # float("inf")
        if func in ("program_id", "num_programs"):
            return SCALAR
        if func == "load":
            return self._shape(positional[0], loop, local) if positional else SCALAR
        if func in _ELEMENTWISE:
            return _join(SCALAR, *(self._shape(a, loop, local) for a in positional))
        if loop is None:
            if func == "arange" and len(positional) == 2 and c.code(positional[0]) == "0" \
                    and c.code(positional[1]) == self.block:
                return ROW
            if func in ("zeros", "full") and positional and c.code(positional[0]).replace(" ", "") in (
                    f"[{self.block}]", f"({self.block},)"):
                return ROW
            if func in _REDUCTIONS and positional and self._shape(positional[0], None, {}) == ROW:
                return SCALAR
        raise ActionError(f"`{c.code(node.func)}` in the loop is not an elementwise tl function")


def _loop_bound(loop: cst.For, tl_roots: frozenset[str]) -> tuple[str, str] | None:
    """``for c in range(0, C)`` / ``range(C)`` / ``tl.range(0, C)`` -> (c, C)."""
    it = loop.iter
    if not isinstance(loop.target, cst.Name) or loop.orelse is not None or not isinstance(it, cst.Call):
        return None
    if c.code(it.func) not in ("range", *(f"{r}.range" for r in tl_roots)) or any(a.keyword is not None for a in it.args):
        return None
    args = [a.value for a in it.args]
    if len(args) == 2 and c.code(args[0]) == "0":
        args = args[1:]
    if len(args) != 1 or not isinstance(args[0], cst.Name):
        return None
    return loop.target.value, args[0].value


def _affine_in(node: cst.BaseExpression, var: str, shapes: _Shapes, loop: _Loop, local: dict[str, Shape]) -> bool:
    """``node`` is affine in ``var`` with scalar coefficients (``base + c * S + offs``)."""
    if var not in c.names_in(node):
        return True
    if isinstance(node, cst.Name):
        return True
    if isinstance(node, cst.BinaryOperation):
        if isinstance(node.operator, (cst.Add, cst.Subtract)):
            return _affine_in(node.left, var, shapes, loop, local) and _affine_in(node.right, var, shapes, loop, local)
        if isinstance(node.operator, cst.Multiply):
            for factor, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(c.unparen(other), cst.Integer) and c.unparen(other).evaluated_value == 0:
                    return False  # `0 * c`: every channel at one address
                if var not in c.names_in(other) and shapes._shape(other, loop, local) == SCALAR:
                    return _affine_in(factor, var, shapes, loop, local)
    return False


class ChannelTile:
    name = "channel_tile"
    kind = "Tiling"
    changes_numerics = False

    def _plan(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel) -> _Plan:
        if kernel.is_autotuned or kernel.heuristics:
            raise ActionError("the kernel is autotuned or has heuristics: its blocks are not the launch's alone")
        if kernel.calls_of("dot", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "debug_barrier"):
            raise ActionError("the kernel multiplies tiles or updates memory atomically")
        kdef, launches = c.locate(module, kernel.name)
        if len(launches) != 1 or launches[0].host is None:
            raise ActionError("needs exactly one launch of the kernel, inside a host function")
        launch = launches[0]
        launch_line = c.launch_statement(launch)
        if launch_line is None or any(a.star for a in launch.call.args):
            raise ActionError("the launch is nested in another statement or unpacks arguments with * or **")
        tl_roots = c.language_roots(analysis)
        tl = c.kernel_language(analysis, kernel)
        triton = next((k for k, v in analysis.names.prefix.items() if v == "triton"), None)
        if tl is None or triton is None:
            raise ActionError("the file does not import triton and triton.language by name")
        body = [s for s in kdef.body.body if not c.is_docstring(s)]
        loops = [s for s in body if isinstance(s, cst.For)]
        bounds = [_loop_bound(l, tl_roots) for l in loops]
        if not loops or None in bounds:
            raise ActionError("no top-level loop `for c in range(0, C)` over a channel count")
        if len({b[1] for b in bounds}) != 1 or any(l.depth > 1 for l in kernel.loops) or len(kernel.loops) != len(loops):
            raise ActionError("the loops do not all run over the same channel count at the top of the kernel")
        channels = bounds[0][1]
        param = kernel.param(channels)
        if param is None or param.kind == "pointer" or channels in c.bound_names(kdef.body):
            raise ActionError(f"{channels} is not a kernel argument the kernel keeps")
        if any(isinstance(s, _COMPOUND) and not isinstance(s, cst.For) for s in body):
            raise ActionError("the kernel has control flow besides the channel loops")
        blocks = {c.code(a.args[1].value) for a in c.calls_in(kdef.body) if _tl_func(a, tl_roots) == "arange"
                  and len(a.args) == 2}
        if len(blocks) != 1 or next(iter(blocks)) not in kernel.constexpr_names:
            raise ActionError("the kernel does not make one vector of a constexpr block (tl.arange(0, BLOCK_S))")
        block = next(iter(blocks))
        if CHANNEL_PARAM in kernel.constexpr_names or kernel.param(CHANNEL_PARAM) is not None:
            raise ActionError(f"the kernel already has a {CHANNEL_PARAM}")
        shapes = _Shapes(kernel, tl_roots, block)
        plans: list[_Loop] = []
        zero_sums: set[int] = set()
        # tl.sum adds half-precision tiles in half precision, where the loop added each vector to an fp32
        # accumulator: in a file that handles half precision the summed tile is cast to the accumulator's fp32.
        half = bool(_HALF.search(analysis.text))
        widen: dict[str, str] = {}
        loop_names: set[str] = set()
        for statement in body:
            if isinstance(statement, cst.For):
                plan = self._loop(statement, shapes, tl_roots, zero_sums)
                plans.append(plan)
                loop_names |= set(plan.locals) | {plan.var}
                continue
            for small in statement.body:  # type: ignore[union-attr]
                read = c.names_in(small)
                if read & loop_names:
                    raise ActionError(f"{', '.join(sorted(read & loop_names))} is read after the loop that assigns it")
                if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                    shapes.outer[small.targets[0].target.value] = shapes.outer_shape(small.value)
                    dtype = next((a.value for a in getattr(small.value, "args", ()) if a.keyword is not None
                                  and a.keyword.value == "dtype"), None)
                    if dtype is not None and c.code(dtype) in {f"{r}.float32" for r in tl_roots} and half:
                        widen[small.targets[0].target.value] = c.code(dtype)
                    else:
                        widen.pop(small.targets[0].target.value, None)
                elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
                    before, value = shapes.outer.get(small.target.value), shapes.outer_shape(small.value)
                    shapes.outer[small.target.value] = None if before is None or value is None else _join(before, value)
                else:
                    for name in c.bound_names(small):
                        shapes.outer[name] = None
        for plan in plans:
            if set(plan.locals) & {n for n, s in shapes.outer.items() if n not in {p.name for p in kernel.params}} \
                    - {acc for _s, acc, _e in plan.sums}:
                raise ActionError("a name is assigned both inside and outside a loop")
        # The launch: C computable on the host, the block a literal (or default) the grid repeats.
        site = analysis.launches_of(kernel.name)[0]
        passed = site.arg(channels)
        if passed is None or not _plain(c.expr(passed.source)):
            raise ActionError(f"the launch does not pass {channels} as an expression the host can take next_power_of_2 of")
        how, node = c.binding_of(launch, kernel, block)
        host = launch.host
        host_var = None  # the host's name for the block, when a constant there sets it
        if how == "literal":
            value = int(node.value.evaluated_value)
        elif how == "default" and isinstance(kernel.param(block).default_value, int):
            value = kernel.param(block).default_value
        elif how == "host" and not c.launch_assignment(launch, node.targets[0].target.value)[1]:
            host_var, value = node.targets[0].target.value, int(node.value.evaluated_value)
        else:
            raise ActionError(f"{block} is not a literal, a default or a host constant at the launch: the host could not cap it")
        if not c.is_pow2(value):
            raise ActionError(f"{block}={value} is not a power of two")
        statements = list(host.body.body)
        at = launch_line  # where the host lines go: before the launch, or before its `grid = ...`
        grid = launch.call.func.slice[0].slice.value  # type: ignore[union-attr]
        if isinstance(grid, cst.Name):
            assign = c.host_assignment(host, grid.value)
            at = next((s for s in statements if assign is not None and isinstance(s, cst.SimpleStatementLine)
                       and any(b is assign for b in s.body)), None)
            if at is None or c.grid_shared(launch, kernel.name):
                raise ActionError("the grid is a name not assigned once in the host function for this launch alone")
        grid_value = c.grid_expression(launch)
        if isinstance(grid_value, cst.Lambda):
            if block not in c.names_in(grid_value.body):
                raise ActionError(f"the grid does not follow {block}")
            sites = []
        elif host_var is not None:
            if host_var not in c.names_in(grid_value):
                raise ActionError(f"the grid does not divide by {host_var}: a smaller block would leave positions out")
            sites = []
        else:
            sites = [s for s in c.grid_literal_sites(launch, kernel, c.launch_values(launch, kernel))[0] if s.block == block]
            if not sites:
                raise ActionError(f"the grid does not divide by {block}: a smaller block would leave positions out")
        first, last = statements.index(at), statements.index(launch_line)
        between = statements[first:last]
        if any(c.bound_names(s) & c.names_in(c.expr(passed.source)) for s in between):
            raise ActionError(f"the host computes {passed.source} between the grid and the launch")
        introduced = [CHANNEL_PARAM]
        if host_var is None:
            introduced.append(block)
        else:
            defined = next((i for i, s in enumerate(statements) if node in getattr(s, "body", ())), None)
            if defined is None or defined >= first or any(host_var in c.bound_names(s) for s in between):
                raise ActionError(f"{host_var} is not assigned once at the top of the host function before the grid")
            if any(c.count_name(s, host_var) for s in statements[last + 1:]):
                raise ActionError(f"the host reads {host_var} after the launch; a capped block would change it there")
        for name in introduced:
            if c.count_name(host, name):
                raise ActionError(f"the host function already uses the name {name}")
        taken = c.names_in(kdef)
        names = {"offs_c": c.first_free(taken, f"offs_{plans[0].var}", "offs_channel"),
                 "mask_c": c.first_free(taken, f"mask_{plans[0].var}", "mask_channel")}
        positional = sum(1 for a in launch.call.args if a.keyword is None)
        if positional > _param_slot(kernel):
            raise ActionError(f"the launch passes arguments positionally past where {CHANNEL_PARAM} would go")
        return _Plan(kdef, launch, launch_line, tl, triton, block, value, channels, passed.source, plans,
                     zero_sums, names, sites, at, host_var,
                     {acc: widen[acc] for l in plans for _s, acc, _e in l.sums if acc in widen})

    def _loop(self, loop: cst.For, shapes: _Shapes, tl_roots: frozenset[str], zero_sums: set[int]) -> _Loop:
        var = _loop_bound(loop, tl_roots)[0]
        plan = _Loop(loop, var)
        stored = False
        for statement in loop.body.body:
            if isinstance(statement, _COMPOUND) or not isinstance(statement, cst.SimpleStatementLine):
                raise ActionError("a channel loop holds control flow")
            for small in statement.body:
                self._loop_statement(small, plan, shapes, tl_roots, stored)
                stored = stored or isinstance(small, cst.Expr)
        for name in c.names_in(loop.body) - set(plan.locals) - {var}:
            if shapes.outer.get(name) == ROW:
                plan.rows.add(name)
        for _small, _acc, summed in plan.sums:
            if _zero_padded(summed, plan, tl_roots):
                zero_sums.add(id(summed))
        return plan

    def _loop_statement(self, small: cst.BaseSmallStatement, plan: _Loop, shapes: _Shapes, tl_roots: frozenset[str],
                        stored: bool) -> None:
        local = plan.locals
        for call in c.calls_in(small):
            if _tl_func(call, tl_roots) in ("load", "store"):
                address = _address(call)
                if plan.var not in c.names_in(address):
                    raise ActionError(f"a {_tl_func(call, tl_roots)} address does not depend on {plan.var}")
                if not _affine_in(address, plan.var, shapes, plan, local):
                    raise ActionError(f"a {_tl_func(call, tl_roots)} address is not affine in {plan.var}")
                if _tl_func(call, tl_roots) == "load" and stored:
                    raise ActionError("a load follows a store in the same iteration")
                kwargs = {a.keyword.value for a in call.args if a.keyword is not None}
                if kwargs & {"boundary_check", "padding_option"}:
                    raise ActionError("a load uses block-pointer options")
        if isinstance(small, cst.Assign):
            if len(small.targets) != 1 or not isinstance(small.targets[0].target, cst.Name):
                raise ActionError("a channel loop assigns something other than one name")
            name = small.targets[0].target.value
            value = small.value
            if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add) \
                    and isinstance(value.left, cst.Name) and value.left.value == name and name not in local:
                self._sum(small, name, value.right, plan, shapes)
                return
            if name == plan.var or shapes.kernel.param(name) is not None:
                raise ActionError(f"the loop assigns {name}")
            if name in local:
                raise ActionError(f"the loop assigns {name} twice")
            if name in shapes.outer and name in c.names_in(value):
                raise ActionError(f"{name} is carried from one iteration to the next, not as a sum")
            local[name] = shapes._shape(value, plan, local)
            return
        if isinstance(small, cst.AugAssign):
            if not isinstance(small.operator, cst.AddAssign) or not isinstance(small.target, cst.Name):
                raise ActionError("an accumulation in a channel loop is not a sum (`acc += ...`)")
            self._sum(small, small.target.value, small.value, plan, shapes)
            return
        if isinstance(small, cst.Expr) and _tl_func(small.value, tl_roots) == "store":
            if shapes._shape(_address(small.value), plan, local) != (True, True):
                raise ActionError("a store does not write a [channel, position] tile")
            for arg in small.value.args[1:]:
                shapes._shape(arg.value, plan, local)
            return
        raise ActionError(f"`{c.code(small)}` in a channel loop is not an assignment, a sum or a store")

    @staticmethod
    def _sum(small, acc: str, summed: cst.BaseExpression, plan: _Loop, shapes: _Shapes) -> None:
        if acc in plan.locals or acc == plan.var or shapes.outer.get(acc) != ROW:
            raise ActionError(f"{acc} is not a [BLOCK_S] accumulator made before the loop")
        if acc in c.names_in(summed):
            raise ActionError(f"the value added to {acc} reads {acc}")
        if shapes._shape(summed, plan, plan.locals) != (True, True):
            raise ActionError(f"the value added to {acc} is not a [channel, position] tile")
        plan.sums.append((small, acc, summed))

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            plan = self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError:
            return []
        passes = f"{len(plan.loops)} channel loops" if len(plan.loops) > 1 else "the channel loop"
        return [Candidate(self.name, self.kind, kernel.name, {},
                          f"Load all channels as one tile: {passes} -> [{CHANNEL_PARAM}, {plan.block}] with "
                          f"{CHANNEL_PARAM}=next_power_of_2({plan.channels_source})",
                          kernel.loops[0].span.start.line)]

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """The first precondition refused (None when the action offers something)."""
        try:
            self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError as exc:
            return str(exc)
        return None

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        if params:
            raise ActionError(f"channel_tile takes no parameters, got {sorted(params)}")
        module = c.parse(text)
        plan = self._plan(module, analysis, kernel)
        tl, offs_c, mask_c = plan.tl, plan.names["offs_c"], plan.names["mask_c"]
        body: list[cst.BaseStatement] = []
        tiled: list[cst.BaseStatement] = []  # the statements that were loop bodies
        first = True
        for statement in plan.kdef.body.body:
            loop = next((l for l in plan.loops if l.node is statement), None)
            if loop is None:
                body.append(statement)
                continue
            inner = [s.visit(_Tile(plan, loop)) for s in loop.node.body.body]
            if first:
                inner = [c.stmt(f"{offs_c} = {tl}.arange(0, {CHANNEL_PARAM})"),
                         c.stmt(f"{mask_c} = {offs_c} < {plan.channels}"), *inner]
                first = False
            inner[0] = inner[0].with_changes(leading_lines=[*loop.node.leading_lines, *inner[0].leading_lines])
            body.extend(inner)
            tiled.extend(inner)
        body = dedupe(_share_inline_loads(body, tiled, plan.tl))
        kparams = _insert_param(list(plan.kdef.params.params), _param_slot(kernel), cst.Param(
            cst.Name(CHANNEL_PARAM), annotation=cst.Annotation(c.expr(f"{tl}.constexpr"))))
        new_kdef = plan.kdef.with_changes(body=plan.kdef.body.with_changes(body=body),
                                          params=plan.kdef.params.with_changes(params=kparams))
        # Host: BLOCK_C from the channel count, the block capped so the tile fits, the grid divides by the capped block.
        call = plan.launch.call
        sites = [(site.node, _block_site(plan.block, site.offset)) for site in plan.grid_sites]
        new_call = call
        if plan.host_var is None:  # the block becomes a host name the grid divides by
            new_call = c.replace_all(call, sites) if sites and plan.host_at is plan.launch_line else call
            arg = next((a for a in new_call.args if c.arg_param(a, new_call, kernel) == plan.block), None)
            if arg is not None:
                new_call = new_call.with_changes(args=[a.with_changes(value=cst.Name(plan.block)) if a is arg else a
                                                       for a in new_call.args])
            else:
                new_call = _kwarg_before_options(new_call, plan.block, cst.Name(plan.block))
        new_call = _kwarg_before_options(new_call, CHANNEL_PARAM, cst.Name(CHANNEL_PARAM))
        launch_line = c.replace_all(plan.launch_line, [(call, new_call)])
        capped = plan.host_var or plan.block
        bound = plan.host_var or str(plan.block_value)
        at = plan.host_at if plan.host_at is plan.launch_line else c.replace_all(plan.host_at, sites)
        at = launch_line if plan.host_at is plan.launch_line else at
        host_lines = [
            c.stmt(f"{CHANNEL_PARAM} = {plan.triton}.next_power_of_2({plan.channels_source})").with_changes(
                leading_lines=plan.host_at.leading_lines),
            c.stmt(f"{capped} = min({bound}, max(1, {TILE_BUDGET} // {CHANNEL_PARAM}))"),
            at.with_changes(leading_lines=[]),
        ]
        pairs = [(plan.kdef, new_kdef), (plan.host_at, cst.FlattenSentinel(host_lines))]
        if plan.host_at is not plan.launch_line:
            pairs.append((plan.launch_line, launch_line))
        module = c.replace_all(module, pairs)
        notes = [f"{plan.block} shrinks below {plan.block_value} when {CHANNEL_PARAM} * {plan.block} would pass "
                 f"{TILE_BUDGET} elements ({plan.block}=8 at 1024 channels; past {TILE_BUDGET} "
                 f"channels the tile alone passes the budget)"]
        if any(id(summed) not in plan.zero_sums for l in plan.loops for _s, _a, summed in l.sums):
            notes.append("a summed value is masked with tl.where: the padded channels would not add zeros")
        loads = sum(1 for l in plan.loops for call in c.calls_in(l.node.body) if _tl_func(call, c.language_roots(analysis)) == "load")
        summary = f"channel tile in {kernel.name}: {len(plan.loops)} loop(s) over {plan.channels} and {loads} load(s) " \
                  f"-> [{CHANNEL_PARAM}, {plan.block}] tiles"
        return c.finish(text, module, summary, notes)


def _share_inline_loads(body: list[cst.BaseStatement], tiled: list[cst.BaseStatement], tl: str) -> list[cst.BaseStatement]:
    """A later pass's ``x = tl.load(A)`` reuses a load of ``A`` an earlier pass made inline (``acc += tl.sum(tl.load(A))``):
    ``x = tl.load(A)`` moves before that statement, which reads ``x``, when nothing in between stores, binds ``x`` or
    a name ``A`` reads, or reads ``x``."""
    body = list(body)
    tiled_ids = {id(s) for s in tiled}
    for j in range(len(body)):
        single = _single_assign(body[j]) if id(body[j]) in tiled_ids else None
        if single is None or _tl_func(single[1], frozenset({tl})) != "load":
            continue
        name, load = single
        load_code = c.code(load)
        for i in range(j - 1, -1, -1):
            earlier = body[i]
            inline = [call for call in c.calls_in(earlier) if c.code(call) == load_code] if id(earlier) in tiled_ids else []
            if inline and name not in c.names_in(earlier):
                between = body[i + 1:j]
                shared = c.replace_all(earlier, [(call, cst.Name(name)) for call in inline])
                moved = body[j].with_changes(leading_lines=earlier.leading_lines)
                body[i:j + 1] = [moved, shared.with_changes(leading_lines=[]), *between]
                break
            text = c.code(earlier)
            if "store" in text or "atomic" in text or c.bound_names(earlier) & (c.names_in(load) | {name}) \
                    or name in c.names_in(earlier):
                break
    return body


def _param_slot(kernel: Kernel) -> int:
    """Where BLOCK_C goes among the kernel's parameters: before the first with a default, else last."""
    return next((p.index for p in kernel.params if p.default is not None), len(kernel.params))


def _block_site(block: str, offset: int) -> cst.BaseExpression:
    """The grid's literal for ``block + offset``, spelled with the block's host name."""
    if offset == 0:
        return cst.Name(block)
    return c.expr(f"({block} {'+' if offset > 0 else '-'} {abs(offset)})")


def _zero_padded(node: cst.BaseExpression, loop: _Loop, tl_roots: frozenset[str], defs: dict | None = None) -> bool:
    """``node`` is 0 in a padded channel: a load there gives its ``other``, which is 0 (times any loaded or outer value,
    over a divisor the channel does not change, summed with another such value)."""
    node = c.unparen(node)
    defs = defs if defs is not None else _local_values(loop)
    if isinstance(node, cst.Name) and node.value in defs:
        return _zero_padded(defs[node.value], loop, tl_roots, defs)
    if _tl_func(node, tl_roots) == "load":
        other = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "other"), None)
        positional = [a for a in node.args if a.keyword is None]
        other = positional[2].value if other is None and len(positional) > 2 else other
        return other is not None and c.code(other) in ("0", "0.0", "0.")
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in c.SHAPE_METHODS:
        return _zero_padded(node.func.value, loop, tl_roots, defs)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _zero_padded(node.expression, loop, tl_roots, defs)
    if isinstance(node, cst.BinaryOperation):
        left, right = node.left, node.right
        if isinstance(node.operator, (cst.Add, cst.Subtract)):
            return _zero_padded(left, loop, tl_roots, defs) and _zero_padded(right, loop, tl_roots, defs)
        if isinstance(node.operator, cst.Multiply):
            return (_zero_padded(left, loop, tl_roots, defs) and _finite(right, loop, tl_roots, defs)) or \
                (_zero_padded(right, loop, tl_roots, defs) and _finite(left, loop, tl_roots, defs))
        if isinstance(node.operator, cst.Divide):
            return _zero_padded(left, loop, tl_roots, defs) and not (c.names_in(right) & (set(defs) | {loop.var}))
    return False


def _finite(node: cst.BaseExpression, loop: _Loop, tl_roots: frozenset[str], defs: dict) -> bool:
    """``node`` is finite in a padded channel: loads with a fill value, outer values and + - * of them."""
    node = c.unparen(node)
    if isinstance(node, cst.Name):
        return node.value != loop.var and (node.value not in defs or _finite(defs[node.value], loop, tl_roots, defs))
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if _tl_func(node, tl_roots) == "load":
        return any(a.keyword is not None and a.keyword.value == "other" for a in node.args) or \
            len([a for a in node.args if a.keyword is None]) > 2
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in c.SHAPE_METHODS:
        return _finite(node.func.value, loop, tl_roots, defs)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _finite(node.expression, loop, tl_roots, defs)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract, cst.Multiply)):
        return _finite(node.left, loop, tl_roots, defs) and _finite(node.right, loop, tl_roots, defs)
    return False


def _local_values(loop: _Loop) -> dict[str, cst.BaseExpression]:
    values = {}
    for statement in loop.node.body.body:
        single = _single_assign(statement)
        if single is not None and single[0] in loop.locals:
            values[single[0]] = single[1]
    return values


class _Tile(cst.CSTTransformer):
    """One channel loop's statement on the tile: ``c`` -> ``offs_c[:, None]``, vectors -> ``v[None, :]``,
    masks gain the channel mask, sums reduce over the channels."""

    def __init__(self, plan: _Plan, loop: _Loop):
        self.plan = plan
        self.loop = loop
        self.sums = {id(small): (acc, summed) for small, acc, summed in loop.sums}
        self.tl_roots = frozenset({plan.tl})

    def _rename(self, node: cst.BaseExpression) -> cst.BaseExpression:
        mapping: dict[str, str | cst.BaseExpression] = {self.loop.var: c.expr(f"{self.plan.names['offs_c']}[:, None]")}
        mapping.update({r: c.expr(f"{r}[None, :]") for r in self.loop.rows})
        return self._masked(c.substitute_names(node, mapping))

    def _masked(self, node: cst.BaseExpression) -> cst.BaseExpression:
        """Every tl.load / tl.store in ``node`` with the channel mask added to its mask."""
        channel = c.expr(f"{self.plan.names['mask_c']}[:, None]")
        tl = self.plan.tl

        class AddMask(cst.CSTTransformer):
            def leave_Call(self, original_node, updated_node):
                if _tl_func(updated_node, frozenset({tl})) not in ("load", "store"):
                    return updated_node
                args = list(updated_node.args)
                positional = [i for i, a in enumerate(args) if a.keyword is None]
                at = 1 if _tl_func(updated_node, frozenset({tl})) == "load" else 2  # tl.load(ptr, mask), tl.store(ptr, v, mask)
                index = positional[at] if len(positional) > at else next(
                    (i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == "mask"), None)
                if index is None:
                    return c.set_kwarg(updated_node, "mask", channel)
                old = args[index].value
                if not isinstance(old, (cst.Name, cst.Subscript, cst.Call)) and not old.lpar:
                    old = old.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                both = cst.BinaryOperation(channel, cst.BitAnd(whitespace_before=cst.SimpleWhitespace(" "),
                                                               whitespace_after=cst.SimpleWhitespace(" ")), old)
                args[index] = args[index].with_changes(value=both)
                return updated_node.with_changes(args=args)

        return node.visit(AddMask())

    def _sum(self, summed: cst.BaseExpression, acc: str) -> cst.BaseExpression:
        value = self._rename(summed)
        if acc in self.plan.widen and not c.code(value).endswith(f".to({self.plan.widen[acc]})"):
            tight = isinstance(value, (cst.Name, cst.Call, cst.Attribute, cst.Subscript)) or bool(value.lpar)
            inner = c.code(value) if tight else f"({c.code(value)})"
            value = c.expr(f"{inner}.to({self.plan.widen[acc]})")
        if id(summed) not in self.plan.zero_sums:
            value = c.expr(f"{self.plan.tl}.where({self.plan.names['mask_c']}[:, None], {c.code(value)}, 0.0)")
        return c.expr(f"{self.plan.tl}.sum({c.code(value)}, axis=0)")

    def leave_SimpleStatementLine(self, original_node, updated_node):
        body = []
        for original, small in zip(original_node.body, updated_node.body):
            hit = self.sums.get(id(original))
            if hit is not None:
                acc, summed = hit
                if isinstance(original, cst.AugAssign):
                    body.append(original.with_changes(value=self._sum(summed, acc)))
                else:
                    body.append(original.with_changes(value=original.value.with_changes(right=self._sum(summed, acc))))
            elif isinstance(original, cst.Assign):
                body.append(original.with_changes(value=self._rename(original.value)))
            else:
                body.append(original.with_changes(value=self._rename(original.value)))
        return updated_node.with_changes(body=body)


ACTION = ChannelTile()
