"""Rows per program: a kernel that gives each row its own program takes a block of BLOCK_M rows.

One program per row of a few hundred or thousand elements leaves most of a GPU idle (tiny
programs, one short row of loads in flight each). Liger, FLA and quack normalisation kernels
instead give each program ``BLOCK_M`` rows as a ``[BLOCK_M, BLOCK_N]`` tile: the row index becomes
``tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)``, every per-row value (the row's pointers,
its sums and maxima) becomes a ``[BLOCK_M]`` vector that meets the row's columns as ``v[:, None]``,
reductions over the row reduce ``axis=1``, loads and stores of row data also mask ``rows < n_rows``,
scalar loop accumulators start as ``[BLOCK_M]`` vectors, and the grid becomes
``cdiv(n_rows, BLOCK_M)``. The host picks ``BLOCK_M`` at run time from the row block: a tile of
about ``TILE`` elements (4096 or 8192; 32 fp32 values a thread with 4 or 8 warps), and never
fewer than about four programs per SM of the target; a row as wide as the tile keeps one row and
its own warps (an autotuned kernel's configs keep choosing them). A program id named ``col``
(one column per program, reducing down the rows) gets the same rewrite as ``BLOCK_COLS`` columns.

Offered only where every row is provably computed alone: the program id of the row axis is used
only as the row index (affine arithmetic; ``.to(tl.int64)`` and row pointers moved with ``+=``
are fine; so is one grid axis split into two indices, ``b = pid // C`` and ``c = pid % C`` with a
row-independent divisor, where every store's address reaches both halves or the index itself, so
no two rows share it), nothing branches, loops or indexes on a per-row value, stores and per-row loads are at
the row's own addresses, nothing is stored to a row-independent address or through a pointer the
kernel also loads from (unless in place: every access through it at the same address), no
atomics, no ``tl.dot``, no 2-D tiles already, and every
call is an elementwise ``tl`` function, ``tl.load``/``tl.store``, a
``tl.sum``/``max``/``min``/``argmax``/``argmin``, or a @triton.jit function of the file whose body is
elementwise in its arguments (no loads, stores, reductions or program ids; it is left as it is). Public
kernels' helpers count too: ``tl.cdiv`` of row-independent values, compiler hints (``tl.multiple_of`` on a
value that stays at most 1-D, ``tl.max_contiguous``/``max_constancy`` on row-independent ones), Python's
``min``/``max`` (elementwise, as Triton's builtins; of per-row values they become ``tl.minimum``/``maximum``,
and every store must then reach the row index itself), and local ``NAME: tl.constexpr = value`` constants. The
aranges span one constexpr (``tl.arange(0, BLOCK)``, or halves such as ``tl.arange(BLOCK // 2, BLOCK)``).
A kernel without a reduction over the row is an elementwise row kernel: offered too (narrow rows
gain as much), unless its program id steps by its own block (``pid * BLOCK + tl.arange(0, BLOCK)``),
which is flat 1-D work that a bigger block (tiling) serves. The grid is a literal tuple (a name
for one, or ``lambda META: (...)`` returning one whose row count does not read META): of a grid with several axes, one axis becomes the row axis (``(tokens, heads)``: the
heads, whose rows share the token's loads), its entry ``cdiv(count, BLOCK_M)``, the others stay;
``BLOCK_M`` then also stays within that axis's count and keeps the programs of all axes together
above the per-SM floor.

A kernel autotuned over its blocks (``triton.Config({"BLOCK_N": 1024}, num_warps=4)``, literal or
generated configs) cannot have ``BLOCK_M`` picked by the host, which never sees the chosen block: a
``@triton.heuristics({"BLOCK_M": lambda args: ...})`` goes right above ``@triton.jit`` (below the autotune
decorator, so it runs on each config's arguments), computing the same tile from ``args["BLOCK_N"]``, each
config's ``num_warps`` (at most 1024 elements a warp) and ``args["n_rows"]`` (the per-SM floor; other grid
axes are left out of it), and the grid becomes ``lambda META: (triton.cdiv(n_rows, META["BLOCK_M"]),)``.
The configs, the autotune key and the warps stay as written. Refused when the kernel is jitted by a call
(no decorator list), already has @triton.heuristics, or its column block is neither set by every config,
passed at the launch nor given a default.

Persistent kernels walk their rows with a grid-stride loop, ``for row in tl.range(tl.program_id(0), n_rows,
tl.num_programs(0), num_stages=...)`` (Python's ``range`` too; the id and the count inline or bound to names
once; ``tl.range`` may take its step as ``step=``, Python's ``range`` may not: Triton's compiler drops it). The loop body, read as a one-row-per-program body with the loop variable as the row index, gets the
rewrite above, and the loop walks blocks of rows: ``tl.range(row_start * BLOCK_M, n_rows, row_step * BLOCK_M,
num_stages=...)`` (its other keyword arguments kept), then ``row = row_block + tl.arange(0, BLOCK_M)`` and
``row_mask = row < n_rows``. Statements before the loop are row-independent and stay, and so does the grid,
which the host sized to the SMs; ``BLOCK_M`` follows the same rule, which then keeps about four row blocks per
SM to share out. Offered only when the loop is the kernel's last statement, the program id and program count
of its axis serve its header alone, its row count is a kernel argument the launch passes plainly, nothing
rebinds the loop variable, no value crosses from one row's trip to the next (every name the body binds is
assigned in a trip before that trip reads it; a name set only inside a nested loop is not, after that loop),
and the kernel is not autotuned over its blocks. ``_grid_stride.py`` holds that part.

Example: kernel=rms_kernel target=h100 params={"TILE": 8192}

```python before
@triton.jit
def rms_kernel(x_ptr, w_ptr, y_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * stride + cols, x * rstd * w, mask=mask)


def rms_norm(x, w, eps=1e-6):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    BLOCK = triton.next_power_of_2(n_cols)
    rms_kernel[(n_rows,)](x, w, y, x.stride(0), n_cols, eps, BLOCK=BLOCK)
    return y
```

```python after
@triton.jit
def rms_kernel(x_ptr, w_ptr, y_ptr, stride, n_cols, eps, n_rows, BLOCK: tl.constexpr, BLOCK_M: tl.constexpr):
    row = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = row < n_rows
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row[:, None] * stride + cols[None, :], mask=row_mask[:, None] & mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    tl.store(y_ptr + row[:, None] * stride + cols[None, :], x * rstd[:, None] * w, mask=row_mask[:, None] & mask)


def rms_norm(x, w, eps=1e-6):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    BLOCK = triton.next_power_of_2(n_cols)
    BLOCK_M = max(1, min(8192 // BLOCK, triton.next_power_of_2(triton.cdiv(n_rows, 528))))
    rms_kernel[(triton.cdiv(n_rows, BLOCK_M),)](x, w, y, x.stride(0), n_cols, eps, n_rows, BLOCK=BLOCK, BLOCK_M=BLOCK_M, num_warps=8 if BLOCK_M > 1 else 4)
    return y
```
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.kernel_model import KernelModel, kernel_model, linear_coefficient
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from . import _grid_stride
from .base import ActionError, Candidate, Edit
from .column_block import _kwarg_before_options
from .name_block import count_free

# Shape kinds of a kernel value, combined with ``|``: S a row-independent scalar, R one value per
# row (a [BLOCK_M] vector after the rewrite), C a row-independent column block ([BLOCK_N], kept),
# RC a row's column block ([BLOCK_M, BLOCK_N] after the rewrite).
S, R, C, RC = 0, 1, 2, 3
_KIND_NAMES = {S: "scalar", R: "per-row value", C: "column block", RC: "row block"}

# Elements per program (BLOCK_M * BLOCK_N) and the warps for that tile: 32 fp32 values per thread.
TILES = {4096: 4, 8192: 8}
ELEMENTS_PER_WARP = 1024  # 32 lanes of 32 fp32 values: an autotune config's warps cap its tile at this many per warp
# Programs per SM the row count must still give before a program takes more rows.
PROGRAMS_PER_SM = 4

_REDUCTIONS = {"sum", "max", "min", "argmax", "argmin"}
_SCANS = {"cumsum", "cumprod"}  # along the row: axis 0 of a row becomes axis 1 of the rows' tile
# triton.language functions that work element by element (and broadcast their arguments).
_ELEMENTWISE = {
    "exp", "exp2", "log", "log2", "log1p", "sqrt", "sqrt_rn", "rsqrt", "abs", "maximum", "minimum", "where",
    "sigmoid", "fma", "erf", "cos", "sin", "tanh", "floor", "ceil", "clamp", "fdiv", "div_rn", "cast", "umulhi",
}
# ``tl.cdiv`` (of row-independent values) and compiler hints, which return their first argument.
_SCALAR_HELPERS = {"cdiv", "multiple_of", "max_contiguous", "max_constancy"}
_DTYPES = {"float16", "bfloat16", "float32", "float64", "int1", "int8", "int16", "int32", "int64",
           "uint8", "uint16", "uint32", "uint64", "float8e4nv", "float8e5"}
_META_ATTRS = {"dtype", "element_ty"}
_LOAD_OPTIONS = {"mask", "other", "cache_modifier", "eviction_policy", "volatile"}
_STORE_OPTIONS = {"mask", "cache_modifier", "eviction_policy"}
_AFFINE_OPS = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide)
_HOST_CALLS = {"next_power_of_2", "cdiv", "size", "stride", "numel", "dim", "len", "int", "min", "max", "shape"}


@dataclass
class _Plan:
    kdef: cst.FunctionDef
    launch: c.LaunchNode
    launch_line: cst.CSTNode  # the statement holding the launch
    kinds: dict[int, int]  # id(expression node) -> kind
    promote: dict[int, str]  # id(loop accumulator's initial value) -> its [BLOCK_M] spelling
    pid_calls: list[cst.Call]
    pid_binding: cst.Assign | None  # ``row = tl.program_id(0)``: its name becomes the row vector
    col_block: str
    col_src: str  # what the host reads for the column block: a literal, a name or a plain expression
    n_rows_src: str  # the grid's row count
    n_rows_param: str | None  # a kernel parameter the launch already passes the row count to
    names: dict[str, str]  # rows, row_mask, n_rows, BLOCK_M
    tl: str
    triton: str
    prefix: dict[str, str]
    grid_axis: int  # the grid axis whose program id is the row index
    n_rows_node: cst.BaseExpression  # that axis's count in the grid tuple
    other_counts: list[str]  # the other axes' counts (empty for a one-axis grid)
    reduces: bool  # the kernel reduces over its rows (else it is an elementwise row kernel)
    grid_dims: int = 1  # the launch grid's axes (the row axis is one of them)
    scans: bool = False  # the kernel scans along its rows (tl.cumsum): lanes of a row share work, as in a reduction
    stride: _grid_stride.GridStride | None = None  # a persistent kernel's grid-stride row loop (the grid then stays)
    # Autotune configs that set blocks (or cannot be read): the column block as the row block's
    # ``@triton.heuristics`` lambda reads it (``args["BLOCK_N"]``); None when the host picks BLOCK_M.
    tuned_col: str | None = None


def _tl_name(func: cst.CSTNode, prefix: dict[str, str]) -> str | None:
    """The function's name under ``triton.language`` (``tl.math.rsqrt`` -> ``rsqrt``), else None."""
    node = func
    while isinstance(node, cst.Attribute):
        node = node.value
    if not isinstance(node, cst.Name):  # ``tl.load(p).to``: a method of a value, not a module function
        return None
    name = c.canonical_name(func, prefix)
    if name.startswith("triton.language."):
        return name.rsplit(".", 1)[1]
    return None


def _arg(call: cst.Call, position: int, keyword: str) -> cst.Arg | None:
    """The argument given by keyword, or at ``position`` among the positional ones."""
    hit = c.kwarg(call, keyword)
    if hit is not None:
        return hit
    positional = [a for a in call.args if a.keyword is None]
    return positional[position] if position < len(positional) else None


def _int_value(node: cst.CSTNode) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(node.expression, cst.Integer):
        return -int(node.expression.evaluated_value)
    return None


class _Infer:
    """Gives every expression of the kernel body its shape kind, or raises why the rewrite is not provable."""

    def __init__(self, kernel: Kernel, prefix: dict[str, str], widen: dict[int, tuple[int, str]], axis: int = 0,
                 device_fns: dict[str, tuple[cst.FunctionDef, Kernel]] | None = None, device_depth: int = 0):
        self.prefix = prefix
        self.widen = widen  # id(start value of a loop accumulator) -> (its kind, its [BLOCK_M] spelling)
        self.axis = axis  # the grid axis whose program id is the row index; the others stay row-independent
        self.device_fns = device_fns or {}  # @triton.jit functions of the file the kernel may call
        self.device = device_depth > 0  # inferring a device function's body: only elementwise work is allowed
        self.device_depth = device_depth  # how many device-function calls deep this body is
        self.params = {p.name for p in kernel.params}
        self.constexprs = set(kernel.constexpr_names)
        self.kinds: dict[int, int] = {}
        self.blocks: set[str] = set()  # constexprs the column aranges span
        self.pid_calls: list[cst.Call] = []
        self.promote: dict[int, tuple[int, str]] = {}  # accumulators found to widen on this pass
        self.stores = 0
        self.row_reductions = 0
        self.row_scans = 0
        self.shared_loads = 0  # loads whose address is the same for every row: one load serves a row block
        self.inits: dict[str, cst.BaseExpression] = {}  # name -> the value of its last plain assignment
        # Program-id decompositions (``b = pid // C``, ``c = pid % C``) and, for the proof that rows
        # still store at their own addresses, each name's current binding: (its assigned value, or
        # None once unknown; the ``+=``/``-=`` values since), and every store's address with the
        # row-index parts it reaches.
        self.decompositions = 0
        self.clamps = 0  # Python min/max of a per-row value: ``min(row, 5)`` maps rows onto one, so stores must pin the row

    # ---- expressions ---------------------------------------------------------------------------
    def expr(self, node: cst.BaseExpression, env: dict[str, int]) -> int:
        kind = self._expr(node, env)
        self.kinds[id(node)] = kind
        return kind

    def _expr(self, node: cst.BaseExpression, env: dict[str, int]) -> int:
        if isinstance(node, cst.Name):
            return env.get(node.value, S)  # parameters, globals, builtins: row-independent
        if isinstance(node, cst.Integer | cst.Float | cst.SimpleString | cst.ConcatenatedString | cst.Ellipsis):
            return S
        if isinstance(node, cst.Attribute):
            base = self.expr(node.value, env)
            if base != S and node.attr.value not in _META_ATTRS:
                raise ActionError(f"reads .{node.attr.value} of a {_KIND_NAMES[base]}")
            return S
        if isinstance(node, cst.BinaryOperation):
            left, right = self.expr(node.left, env), self.expr(node.right, env)
            if R in (left, right) and not isinstance(node.operator, _AFFINE_OPS):
                if not isinstance(node.operator, cst.FloorDivide | cst.Modulo):
                    raise ActionError(f"computes `{c.code(node)}` from a per-row value with more than + - * / // %")
                # ``b = pid // C``, ``c = pid % C``: one grid axis split into two indices. Lane-wise on the
                # [BLOCK_M] row vector it gives each row what its own program computed; that rows still
                # store at their own addresses (both halves reach each store) is checked after the body.
                if left != R or right != S:
                    raise ActionError(f"computes `{c.code(node)}`: `//` and `%` of the row index need a row-independent "
                                      f"scalar divisor, not a {_KIND_NAMES[right]}" if left == R else
                                      f"computes `{c.code(node)}`: divides by a per-row value")
                self.decompositions += 1
            return left | right
        if isinstance(node, cst.UnaryOperation):
            kind = self.expr(node.expression, env)
            if isinstance(node.operator, cst.Not) and kind != S:
                raise ActionError("`not` of a tensor value")
            return kind
        if isinstance(node, cst.Comparison):
            kind = self.expr(node.left, env)
            for target in node.comparisons:
                kind |= self.expr(target.comparator, env)
            if len(node.comparisons) > 1 and kind != S:
                raise ActionError("a chained comparison of tensor values")
            return kind
        if isinstance(node, cst.Call):
            return self._call(node, env)
        if isinstance(node, cst.BooleanOperation | cst.IfExp | cst.Subscript | cst.Tuple | cst.List):
            kind = S
            for child in node.children:
                if isinstance(child, cst.BaseExpression):
                    kind |= self.expr(child, env)
                elif isinstance(child, cst.CSTNode):
                    self._all_scalar(child, env)
            if kind != S:
                raise ActionError(f"{type(node).__name__.lower()} of a {_KIND_NAMES[kind]} (`{c.code(node)}`)")
            return S
        raise ActionError(f"`{c.code(node)}` is not an expression the rewrite knows")

    def _all_scalar(self, node: cst.CSTNode, env: dict[str, int]) -> None:
        """Every expression under ``node`` must be row-independent and scalar."""

        outer = self

        class V(cst.CSTVisitor):
            def on_visit(self, n: cst.CSTNode) -> bool:
                if isinstance(n, cst.BaseExpression):
                    if outer.expr(n, env) != S:
                        raise ActionError(f"`{c.code(n)}` mixes a tensor into a scalar context")
                    return False
                return True

        node.visit(V())

    def _call(self, call: cst.Call, env: dict[str, int]) -> int:
        func = call.func
        if any(a.star for a in call.args):
            raise ActionError("a call unpacks arguments with * or **")
        name = _tl_name(func, self.prefix)
        if self.device and name in ("program_id", "num_programs", "arange", "zeros", "full", "load", "store", *_REDUCTIONS):
            raise ActionError(f"a device function the kernel calls uses tl.{name}: it is not elementwise")
        if name in ("program_id", "num_programs"):
            axis = _arg(call, 0, "axis")
            index = _int_value(axis.value) if axis is not None and len(call.args) == 1 else None
            if index is None:
                raise ActionError(f"`{c.code(call)}` does not name its grid axis by a number")
            if index != self.axis:
                return S  # another grid axis: the same for every row of a program
            if name == "num_programs":
                # A grid-stride loop over single rows (``_grid_stride``) is planned before this; any other use
                # (a row block per trip already, a stride read as a number) has no one-row reading.
                raise ActionError(f"uses tl.num_programs({index}) of the row axis, not as the step of a grid-stride loop over "
                                  f"single rows (`for row in tl.range(tl.program_id({index}), n_rows, tl.num_programs({index}))`)")
            self.pid_calls.append(call)
            return R
        if name in ("atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and",
                    "atomic_or", "atomic_xor", "dot", "debug_barrier", "make_block_ptr", "make_tensor_descriptor"):
            raise ActionError(f"uses tl.{name}")
        if name == "arange":
            # ``tl.arange(0, BLOCK)``, also ``tl.arange(BLOCK // 2, BLOCK)`` (rotary halves): bounds from
            # constexprs and numbers only, so the range is the same for every row.
            args = [a.value for a in call.args]
            if len(args) != 2 or any(a.keyword is not None for a in call.args) or not all(self._constant(a) for a in args):
                raise ActionError(f"`{c.code(call)}` is not `tl.arange(start, end)` over constexprs")
            self.blocks |= c.names_in(call.args[0].value) | c.names_in(call.args[1].value)
            return C
        if name in ("zeros", "full"):
            shape = _arg(call, 0, "shape")
            elements = shape.value.elements if shape is not None and isinstance(shape.value, cst.List | cst.Tuple) else None
            if not elements or len(elements) != 1:
                raise ActionError(f"`{c.code(call)}` is not a 1-D block")
            for a in call.args:
                self._all_scalar(a.value, env)
            return C
        if name in _REDUCTIONS:
            return self._reduction(call, name, env)
        if name in _SCANS:
            return self._scan(call, env)
        if name == "load":
            return self._load(call, env)
        if name == "store":
            raise ActionError("tl.store inside an expression")
        if name in _SCALAR_HELPERS:
            return self._scalar_helper(call, name, env)
        if name in _ELEMENTWISE:
            kind = S
            for a in call.args:
                k = self.expr(a.value, env)
                if a.keyword is not None and a.keyword.value in ("dtype", "sanitize_overflow") and k != S:
                    raise ActionError(f"a tensor as {a.keyword.value}")
                kind |= k
            return kind
        if isinstance(func, cst.Attribute) and name is None:
            base = self.expr(func.value, env)
            if base == S:
                for a in call.args:
                    if self.expr(a.value, env) != S:
                        raise ActionError(f"`{c.code(call)}` takes a tensor argument")
                return S
            if func.attr.value in c.SHAPE_METHODS:
                for a in call.args:
                    if self.expr(a.value, env) != S:
                        raise ActionError(f"`{c.code(call)}` takes a tensor argument")
                return base
            raise ActionError(f"calls .{func.attr.value}() on a {_KIND_NAMES[base]}")
        if isinstance(func, cst.Name) and func.value in self.device_fns and name is None:
            return self._device_call(call, env)
        if isinstance(func, cst.Name) and func.value in ("min", "max") and name is None:
            return self._builtin_min_max(call, env)
        if isinstance(func, cst.Name) and func.value in ("float", "int") and name is None:
            for a in call.args:
                if self.expr(a.value, env) != S:
                    raise ActionError(f"{func.value}() of a tensor value")
            return S
        if name in _DTYPES:
            # ``tl.float32(0.0)``: Triton's dtypes are not callable (TypeError when compiled or interpreted, Triton 3.9).
            raise ActionError(f"calls `{c.code(func)}(...)`: Triton dtypes are not callable, so the kernel does not compile "
                              f"(`tl.full([], value, {c.code(func)})` or `.to({c.code(func)})` are the spellings that do)")
        raise ActionError(f"calls `{c.code(func)}`, which the rewrite does not know to be per row")

    def _builtin_min_max(self, call: cst.Call, env: dict[str, int]) -> int:
        """Python's ``min(a, b)`` in a kernel: Triton's builtin_min folds ``tl.minimum`` over the arguments, elementwise.

        Per-row arguments are rewritten to ``tl.minimum``/``tl.maximum`` (the same NaN rule, no propagation): once they
        are [BLOCK_M] vectors, the builtin is deprecated for blocks and wrong under the interpreter (Python's own min).
        """
        if len(call.args) < 2 or any(a.keyword is not None for a in call.args):
            raise ActionError(f"`{c.code(call)}` is not min/max of two or more plain arguments")
        kind = S
        for a in call.args:
            kind |= self.expr(a.value, env)
        if self.device and kind & R:
            # The device function is left as written: its builtin would meet [BLOCK_M] blocks (deprecated, and
            # Python's own min under the interpreter).
            raise ActionError(f"a device function the kernel calls takes `{c.code(call)}` of a per-row value")
        self.clamps += bool(kind & R)
        return kind

    def _scalar_helper(self, call: cst.Call, name: str, env: dict[str, int]) -> int:
        """``tl.cdiv(a, b)`` of row-independent values, or a compiler hint (``tl.multiple_of(x, 16)``) on a value it keeps.

        A hint's kind is its first argument's; its values must be row-independent. ``max_contiguous`` and
        ``max_constancy`` on a per-row value would claim runs across rows that the [BLOCK_M] vector does not have,
        and ``multiple_of`` takes one value per axis, so a row block (2-D after the rewrite) keeps none of them.
        """
        kinds = [self.expr(a.value, env) for a in call.args]
        if name == "cdiv":
            kind = S
            for k in kinds:
                kind |= k
            if kind & R:  # ``//`` of a per-row value: the rows' addresses could meet (the split rules see only ``//``)
                raise ActionError(f"`{c.code(call)}` divides a {_KIND_NAMES[kind]}")
            return kind
        first = _arg(call, 0, "input")
        if first is None or any(k != S for a, k in zip(call.args, kinds) if a is not first):
            raise ActionError(f"`{c.code(call)}` is not a hint on one value with row-independent values")
        kind = self.kinds[id(first.value)]
        if kind == RC or (kind == R and name != "multiple_of"):
            raise ActionError(f"`{c.code(call)}` hints on a {_KIND_NAMES[kind]}, whose shape the rewrite changes")
        return kind

    def _constant(self, node: cst.BaseExpression) -> bool:
        """Numbers and constexprs under + - * //: a compile-time value."""
        if isinstance(node, cst.Integer):
            return True
        if isinstance(node, cst.Name):
            return node.value in self.constexprs
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add | cst.Subtract | cst.Multiply | cst.FloorDivide):
            return self._constant(node.left) and self._constant(node.right)
        return False

    def _device_call(self, call: cst.Call, env: dict[str, int]) -> int:
        """A @triton.jit function of the file: per row when its body is elementwise in its arguments.

        Its body is inferred with each parameter of the kind of the argument passed for it; it may
        not read the program id, load, store, reduce or build blocks, so its result broadcasts like
        any elementwise ``tl`` function (the call site's arguments are rewritten, the function is not).
        """
        fdef, fn = self.device_fns[call.func.value]  # type: ignore[union-attr]
        if self.device_depth >= 4:
            raise ActionError(f"`{c.code(call.func)}` calls device functions too deeply")
        kinds: dict[str, int] = {}
        names = [p.name for p in fn.params]
        for i, a in enumerate(call.args):
            kind = self.expr(a.value, env)
            target = a.keyword.value if a.keyword is not None else (names[i] if i < len(names) else None)
            if target is None or target not in names:
                raise ActionError(f"`{c.code(call)}` passes more arguments than `{fn.name}` takes")
            kinds[target] = kind
        inner = _Infer(fn, self.prefix, {}, self.axis, self.device_fns, self.device_depth + 1)
        env_in = {p: kinds.get(p, S) for p in names}
        body = [s for s in fdef.body.body if not c.is_docstring(s)]
        if not body or not isinstance(body[-1], cst.SimpleStatementLine) or len(body[-1].body) != 1 \
                or not isinstance(body[-1].body[0], cst.Return) or body[-1].body[0].value is None:
            raise ActionError(f"`{fn.name}` does not end in one `return value`")
        env_in = inner.block(body[:-1], env_in)
        kind = inner.expr(body[-1].body[0].value, env_in)
        if inner.stores or inner.promote:
            raise ActionError(f"`{fn.name}` stores or carries a widening value around a loop")
        self.decompositions += inner.decompositions  # its result is opaque to the stores' row-index check
        self.clamps += inner.clamps
        return kind

    def _reduction(self, call: cst.Call, name: str, env: dict[str, int]) -> int:

        value = _arg(call, 0, "input")
        axis = _arg(call, 1, "axis")
        if value is None or any(a.keyword is not None and a.keyword.value in ("keep_dims", "return_indices", "combine_fn")
                                for a in call.args):
            raise ActionError(f"`{c.code(call)}` is not a plain reduction")
        if axis is not None and _int_value(axis.value) not in (0, -1):
            raise ActionError(f"`{c.code(call)}` reduces an axis of a 2-D value")
        for a in call.args:
            if a is not value and a is not axis and self.expr(a.value, env) != S:
                raise ActionError(f"`{c.code(call)}` takes a tensor option")
        kind = self.expr(value.value, env)
        if kind == RC:
            self.row_reductions += 1
            return R
        if kind == C:
            return S  # the same for every row
        raise ActionError(f"`{c.code(call)}` reduces a {_KIND_NAMES[kind]}")

    def _scan(self, call: cst.Call, env: dict[str, int]) -> int:
        """``tl.cumsum(row, axis=0)``: a scan along the row stays within the row."""
        value, axis = _arg(call, 0, "input"), _arg(call, 1, "axis")
        if value is None or any(a.keyword is not None and a.keyword.value not in ("input", "axis", "reverse")
                                for a in call.args):
            raise ActionError(f"`{c.code(call)}` is not a plain scan")
        if axis is not None and _int_value(axis.value) not in (0, -1):
            raise ActionError(f"`{c.code(call)}` scans an axis of a 2-D value")
        for a in call.args:
            if a is not value and a is not axis and self.expr(a.value, env) != S:
                raise ActionError(f"`{c.code(call)}` takes a tensor option")
        kind = self.expr(value.value, env)
        if kind != RC:
            raise ActionError(f"`{c.code(call)}` scans a {_KIND_NAMES[kind]}, not a row")
        self.row_scans += 1
        return RC

    def _load(self, call: cst.Call, env: dict[str, int]) -> int:
        pointer = _arg(call, 0, "pointer")
        for a in call.args[1:]:
            if a.keyword is not None and a.keyword.value not in _LOAD_OPTIONS:
                raise ActionError(f"tl.load with {a.keyword.value}= (block pointers or descriptors)")
        if pointer is None or len([a for a in call.args if a.keyword is None]) > 3:
            raise ActionError(f"`{c.code(call)}` is not `tl.load(pointer, mask, other)`")
        kind = self.expr(pointer.value, env)
        for a in call.args:
            if a is pointer:
                continue
            k = self.expr(a.value, env)
            if k & ~kind:
                raise ActionError(f"`{c.code(call)}` masks a {_KIND_NAMES[kind]} with a {_KIND_NAMES[k]}")
        self.shared_loads += not kind & R
        return kind

    def store(self, call: cst.Call, env: dict[str, int]) -> None:
        pointer, value = _arg(call, 0, "pointer"), _arg(call, 1, "value")
        for a in call.args:
            if a.keyword is not None and a.keyword.value not in _STORE_OPTIONS | {"pointer", "value"}:
                raise ActionError(f"tl.store with {a.keyword.value}=")
        if pointer is None or value is None or len([a for a in call.args if a.keyword is None]) > 3:
            raise ActionError(f"`{c.code(call)}` is not `tl.store(pointer, value, mask)`")
        kind = self.expr(pointer.value, env)
        if not kind & R:
            raise ActionError(f"`{c.code(call)}` stores to an address that is the same for every row")
        for a in call.args:
            if a is not pointer and self.expr(a.value, env) & ~kind:
                raise ActionError(f"`{c.code(call)}` stores a wider value than its address")

    # ---- statements ----------------------------------------------------------------------------
    def block(self, statements: list[cst.BaseStatement] | tuple, env: dict[str, int]) -> dict[str, int]:
        for statement in statements:
            env = self.statement(statement, env)
        return env

    def statement(self, statement: cst.BaseStatement, env: dict[str, int]) -> dict[str, int]:
        env = dict(env)
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                self.small(small, env)
            return env
        if isinstance(statement, cst.If):
            if self.expr(statement.test, env) != S:
                raise ActionError(f"branches on a per-row value (`if {c.code(statement.test)}`)")
            then = self.block(statement.body.body, env)
            orelse = env
            if isinstance(statement.orelse, cst.If):
                orelse = self.statement(statement.orelse, env)
            elif isinstance(statement.orelse, cst.Else):
                orelse = self.block(statement.orelse.body.body, env)
            out = dict(env)
            for name in sorted(set(then) | set(orelse)):  # sorted: the same name in the reason on every run
                kinds = {k for k in (then.get(name), orelse.get(name)) if k is not None}
                if len(kinds) > 1:
                    raise ActionError(f"{name} is a {' in one branch and a '.join(_KIND_NAMES[k] for k in sorted(kinds))} in the other")
                out[name] = kinds.pop()
            return out
        if isinstance(statement, cst.For):
            return self.loop(statement, env)
        raise ActionError(f"a `{type(statement).__name__.lower()}` statement in the kernel")

    def loop(self, loop: cst.For, env: dict[str, int]) -> dict[str, int]:
        it = loop.iter
        if loop.orelse is not None or not isinstance(loop.target, cst.Name) or not isinstance(it, cst.Call) or \
                c.canonical_name(it.func, self.prefix) not in ("range", "triton.language.range", "triton.language.static_range"):
            raise ActionError("a loop that is not `for i in range(...)`")
        for a in it.args:
            kind = self.expr(a.value, env)
            if kind & R:  # Liger's backward kernels: ``range(row_start, row_end)`` walks a program's own rows
                raise ActionError(f"the loop `for {c.code(loop.target)} in {c.code(it)}` has bounds from the row index or "
                                  "other per-row values: the program walks rows itself, or rows take different trip counts")
            if kind != S:
                raise ActionError(f"`{c.code(a.value)}` mixes a tensor into a scalar context")
        inits = dict(self.inits)  # the start values, before the body reassigns them
        head = dict(env)
        head[loop.target.value] = S
        for _ in range(4):
            after = self.block(loop.body.body, head)
            joined = {name: head.get(name, S) | after.get(name, S) if name in head else after[name] for name in set(head) | set(after)}
            if joined == head:
                break
            head = joined
        else:
            raise ActionError("the loop's values do not settle")
        # A value carried around the loop that widens (a scalar sum that becomes one sum per row)
        # must start wide: only plain constants and tl.zeros/tl.full blocks can.
        for name, kind in head.items():
            before = env.get(name)
            if before is None or before == kind or name == loop.target.value:
                continue
            init = inits.get(name)
            spelled = self._widened(init, before, kind) if init is not None else None
            if spelled is None:
                raise ActionError(f"{name} is carried around a loop and becomes a {_KIND_NAMES[kind]}; its start "
                                  f"`{c.code(init) if init is not None else '?'}` cannot be widened")
            self.promote[id(init)] = (kind, spelled)
        return head

    def _widened(self, init: cst.BaseExpression, before: int, after: int) -> str | None:
        """How the start value of a widened accumulator is spelled (``{M}``, ``{tl}`` placeholders)."""
        if before == S and after == R:
            if isinstance(init, cst.Float) and float(init.evaluated_value) == 0.0:
                return "{tl}.zeros([{M}], dtype={tl}.float32)"
            if isinstance(init, cst.Float) or (isinstance(init, cst.UnaryOperation) and isinstance(init.expression, cst.Float)):
                return f"{{tl}}.full([{{M}}], {c.code(init)}, dtype={{tl}}.float32)"
            if isinstance(init, cst.Integer) or _int_value(init) is not None:
                return f"{{tl}}.full([{{M}}], {c.code(init)}, dtype={{tl}}.int32)"
            text = "".join(c.code(init).split())
            if text in ('float("-inf")', "float('-inf')", '-float("inf")', "-float('inf')", 'float("inf")', "float('inf')"):
                return f"{{tl}}.full([{{M}}], {c.code(init)}, dtype={{tl}}.float32)"
            return None
        if before == C and after == RC and isinstance(init, cst.Call) and _tl_name(init.func, self.prefix) in ("zeros", "full"):
            shape = _arg(init, 0, "shape")
            inner = c.code(shape.value.elements[0].value)
            rest = "".join(", " + c.code(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)) for a in init.args if a is not shape)
            return f"{c.code(init.func)}([{{M}}, {inner}]{rest})"
        return None

    def small(self, small: cst.BaseSmallStatement, env: dict[str, int]) -> None:
        if isinstance(small, cst.Expr):
            value = small.value
            if isinstance(value, cst.SimpleString | cst.ConcatenatedString):
                return  # a docstring
            if isinstance(value, cst.Call) and _tl_name(value.func, self.prefix) == "store":
                self.store(value, env)
                self.stores += 1
                return
            raise ActionError(f"the statement `{c.code(small)}` is not an assignment or a store")
        if isinstance(small, cst.Assign):
            if len(small.targets) != 1 or not isinstance(small.targets[0].target, cst.Name):
                raise ActionError(f"`{c.code(small)}` assigns something other than one name")
            name = small.targets[0].target.value
            env[name] = self.expr(small.value, env)
            if id(small.value) in self.widen:  # a loop accumulator's start, already known to widen
                env[name] = self.widen[id(small.value)][0]
            self.inits[name] = small.value
            return
        if isinstance(small, cst.AugAssign):
            if not isinstance(small.target, cst.Name):
                raise ActionError(f"`{c.code(small)}` updates something other than a name")
            name = small.target.value
            env[name] = env.get(name, S) | self.expr(small.value, env)
            self.kinds[id(small.target)] = env[name]
            return
        if isinstance(small, cst.AnnAssign):
            # ``UNROLL: tl.constexpr = 4``: a local compile-time constant, the same for every row and left as written.
            if not isinstance(small.target, cst.Name) or small.value is None or \
                    c.canonical_name(small.annotation.annotation, self.prefix) != "triton.language.constexpr":
                raise ActionError(f"`{c.code(small).strip()}` is an annotated assignment other than `name: tl.constexpr = value`")
            name = small.target.value
            if self.expr(small.value, env) != S:
                raise ActionError(f"`{c.code(small).strip()}` makes a constexpr of a tensor value")
            env[name] = S
            self.constexprs.add(name)
            self.inits[name] = small.value
            return
        if isinstance(small, cst.Pass):
            return
        raise ActionError(f"a `{type(small).__name__.lower()}` statement in the kernel")


class _Rewrite:
    """Rebuilds kernel expressions for [BLOCK_M] rows from the kinds ``_Infer`` found."""

    def __init__(self, plan: _Plan):
        self.plan = plan
        self.kinds = plan.kinds
        self.rows_expr = c.expr(f"{plan.tl}.program_id({plan.grid_axis}) * {plan.names['BLOCK_M']} + "
                                f"{plan.tl}.arange(0, {plan.names['BLOCK_M']})")

    def kind(self, node: cst.CSTNode) -> int:
        return self.kinds.get(id(node), S)

    def rw(self, node: cst.BaseExpression, wide: bool) -> cst.BaseExpression:
        """``node`` for the rewritten kernel; ``wide``: it meets a row block, so per-row values become ``v[:, None]``."""
        kind = self.kind(node)
        if kind in (S, C):
            return node
        if kind == R and wide:
            return self.expand(node)
        inner_wide = kind == RC
        if isinstance(node, cst.BinaryOperation):
            left, right = self.rw(node.left, inner_wide), self.rw(node.right, inner_wide)
            if inner_wide:  # ``row_ptr + cols`` -> ``row_ptr[:, None] + cols[None, :]``: the tile's two axes, spelled
                if self.kind(node.left) == C and self.kind(node.right) == R and isinstance(node.left, cst.Name):
                    left = self.sub(node.left, "None, :")
                if self.kind(node.right) == C and self.kind(node.left) == R and isinstance(node.right, cst.Name):
                    right = self.sub(node.right, "None, :")
            return node.with_changes(left=left, right=right)
        if isinstance(node, cst.UnaryOperation):
            return node.with_changes(expression=self.rw(node.expression, inner_wide))
        if isinstance(node, cst.Comparison):
            return node.with_changes(left=self.rw(node.left, inner_wide), comparisons=[
                t.with_changes(comparator=self.rw(t.comparator, inner_wide)) for t in node.comparisons])
        if isinstance(node, cst.Call):
            return self.call(node, kind)
        if isinstance(node, cst.Attribute):
            return node
        return node  # names keep their spelling: the value behind them changed shape

    def expand(self, node: cst.BaseExpression) -> cst.BaseExpression:
        """A per-row value as a [BLOCK_M, 1] column, pushed down through arithmetic to the names."""
        if isinstance(node, cst.BinaryOperation) and not node.lpar:
            return node.with_changes(left=self._expand_part(node.left), right=self._expand_part(node.right))
        rebuilt = self.rw(node, False)
        if isinstance(rebuilt, cst.BinaryOperation | cst.UnaryOperation | cst.Comparison) and not rebuilt.lpar:
            rebuilt = rebuilt.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return self.sub(rebuilt, ":, None")

    def _expand_part(self, node: cst.BaseExpression) -> cst.BaseExpression:
        return self.expand(node) if self.kind(node) == R else node

    @staticmethod
    def sub(node: cst.BaseExpression, index: str) -> cst.BaseExpression:
        return cst.Subscript(value=node, slice=c.expr(f"x[{index}]").slice)

    def mask(self, old: cst.BaseExpression | None, wide: bool) -> cst.BaseExpression:
        row_mask = self.plan.names["row_mask"] + ("[:, None]" if wide else "")
        if old is None:
            return c.expr(row_mask)
        new = self.rw(old, wide)
        if not isinstance(new, cst.Name | cst.Subscript | cst.Attribute | cst.Call) and not new.lpar:
            new = new.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return cst.BinaryOperation(c.expr(row_mask), cst.BitAnd(whitespace_before=cst.SimpleWhitespace(" "),
                                                               whitespace_after=cst.SimpleWhitespace(" ")), new)

    def call(self, call: cst.Call, kind: int) -> cst.BaseExpression:
        name = _tl_name(call.func, self.plan.prefix)
        if any(call is p for p in self.plan.pid_calls):
            return self.rows_expr
        if name in _REDUCTIONS or name in _SCANS:
            value, axis = _arg(call, 0, "input"), _arg(call, 1, "axis")
            args = []
            for a in call.args:
                if a is value:
                    args.append(a.with_changes(value=self.rw(a.value, True)))
                elif a is axis:
                    args.append(a.with_changes(value=cst.Integer("1")))
                else:
                    args.append(a)
            if axis is None:
                comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                args[-1] = args[-1].with_changes(comma=comma) if len(args) == 1 else args[-1]
                eq = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
                args.insert(1, cst.Arg(cst.Integer("1"), keyword=cst.Name("axis"), equal=eq,
                                       comma=comma if len(args) > 1 else cst.MaybeSentinel.DEFAULT))
            return call.with_changes(args=args)
        if name in ("load", "store"):
            return self.memory(call, name, kind)
        if isinstance(call.func, cst.Attribute) and name is None:  # ``x.to(tl.float32)``
            base = self.rw(call.func.value, kind == RC)
            if any(call.func.value is p for p in self.plan.pid_calls) and not isinstance(base, cst.Name):
                base = base.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            return call.with_changes(func=call.func.with_changes(value=base))
        args = [a.with_changes(value=self.rw(a.value, kind == RC)) for a in call.args]
        if name is None and isinstance(call.func, cst.Name) and call.func.value in ("min", "max"):
            return self.min_max(call.func.value, args)
        return call.with_changes(args=args)

    def min_max(self, builtin: str, args: list[cst.Arg]) -> cst.Call:
        """``min(a, b, c)`` of per-row values as ``tl.minimum(tl.minimum(a, b), c)``: what Triton's builtin computes."""
        func = c.expr(f"{self.plan.tl}.{'minimum' if builtin == 'min' else 'maximum'}")
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        folded = cst.Call(func, [args[0].with_changes(comma=comma), args[1].with_changes(comma=cst.MaybeSentinel.DEFAULT)])
        for a in args[2:]:
            folded = cst.Call(func, [cst.Arg(folded, comma=comma), a.with_changes(comma=cst.MaybeSentinel.DEFAULT)])
        return folded

    def memory(self, call: cst.Call, name: str, kind: int) -> cst.Call:
        pointer = _arg(call, 0, "pointer")
        mask_position = 1 if name == "load" else 2
        mask = _arg(call, mask_position, "mask")
        pointer_kind = self.kind(pointer.value)
        if not pointer_kind & R:
            return call  # row-independent data (weights): every row reads the same
        wide = pointer_kind == RC
        new_mask = self.mask(mask.value if mask is not None else None, wide)
        args = []
        for a in call.args:
            if a is mask:
                args.append(a.with_changes(value=new_mask))
            else:
                args.append(a.with_changes(value=self.rw(a.value, wide)))
        new = call.with_changes(args=args)
        if mask is None:
            positional = [a for a in call.args if a.keyword is None]
            if len(positional) > mask_position:  # ``other`` given positionally after a missing mask cannot happen
                raise ActionError("a positional argument after a missing mask")
            new = c.set_kwarg(new, "mask", new_mask)
        return new


class RowsPerProgram:
    name = "rows_per_program"
    kind = "Tiling"
    changes_numerics = False

    def _plan(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel) -> _Plan:
        kdef, launches = c.locate(module, kernel.name)
        if len(launches) != 1:
            raise ActionError("needs exactly one launch of the kernel in this file")
        tune = kernel.autotune
        # Configs that only pick warps and stages (FLA's norms) leave BLOCK_M to the host, as without autotune.
        # Configs that pick the column block get BLOCK_M from a @triton.heuristics under the autotune decorator.
        tuned = tune is not None and (not tune.configs_known or any(config.kwargs for config in tune.configs))
        if tuned:
            why = _tuned_problem(kdef, kernel)
            if why is not None:
                raise ActionError(why)
        if kernel.heuristics:
            raise ActionError("@triton.heuristics sets the kernel's blocks")
        prefix = analysis.names.prefix
        tl = next((k for k, v in prefix.items() if v == "triton.language"), None)
        triton = next((k for k, v in prefix.items() if v == "triton"), None)
        if tl is None or triton is None or not analysis.imports_triton:
            raise ActionError("the file does not import triton and triton.language by name")
        launch = launches[0]
        grid_axes = self._grid_axes(launch)
        device_fns = self._device_fns(module, analysis, kernel)
        stride = _grid_stride.find(kdef, prefix)
        if stride is not None:
            if tuned:
                raise ActionError("a grid-stride kernel autotuned over block sizes: its row block would need each config's "
                                  "column block, and the host picks it for the grid-stride form")
            return self._plan_grid_stride(module, analysis, kernel, kdef, launch, stride, tl, triton, prefix, device_fns)
        # Each grid axis may be the row axis; the others stay as they are. Of the axes that pass, the
        # one with a reduction over its rows, then the one whose rows share the most loads (rotary
        # cos/sin tables shared by a token's heads), then the first.
        model = kernel_model(analysis, kernel)
        tried: list[tuple[int, str]] = []
        found: list[tuple[tuple[bool, int, int], int, _Infer, dict[int, tuple[int, str]]]] = []
        for grid_axis in range(len(grid_axes) if grid_axes else 1):
            try:
                infer, widen = self._infer(kdef, kernel, prefix, grid_axis, device_fns, model,
                                           {model.program_ids[grid_axis]} if grid_axis in model.program_ids else set())
            except ActionError as exc:
                tried.append((grid_axis, str(exc)))
                continue
            found.append(((infer.row_reductions > 0, infer.shared_loads, -grid_axis), grid_axis, infer, widen))
        if not found:
            for i, (axis, why) in enumerate(tried):
                split = _grid_stride.own_split(kdef, prefix, axis) if why.startswith("uses tl.num_programs(") else None
                if split is not None:
                    why = (f"the kernel shares its rows out among the programs itself: `{split}` reads "
                           f"tl.num_programs({axis}), not a grid-stride loop over single rows "
                           f"(`for row in tl.range(tl.program_id({axis}), n_rows, tl.num_programs({axis}))`)")
                    tried[i] = (axis, why)
            if len(tried) == 1:
                raise ActionError(tried[0][1])
            raise ActionError("no grid axis is only a row index: " + "; ".join(f"axis {a}: {why}" for a, why in tried))
        _, grid_axis, infer, widen = max(found, key=lambda f: f[0])
        col_block = next(iter(infer.blocks))
        # The program id may only be the row index: what it reaches must be per-row values (the
        # kinds say so), and it may not be compared or used as a number elsewhere: ``_Infer``
        # already refused control flow, subscripts and calls on it.
        pid_binding = self._pid_binding(kdef, infer.pid_calls)
        if launch.host is None:
            raise ActionError("the launch is at module level")
        if grid_axes is None:
            raise ActionError("the launch grid is not a literal tuple (`(n_rows,)`, `(n_tokens, n_heads)`)")
        grid = launch.call.func.slice[0].slice.value  # type: ignore[union-attr]
        if isinstance(grid, cst.Name):
            # The grid tuple is written again at the launch: its names must mean there what they meant at ``grid = ...``.
            moving = next((n for n in c.names_in(c.grid_expression(launch)) if not _stable(launch.host, n)), None)
            if moving is not None:
                raise ActionError(f"the grid reads {moving}, which the host function binds more than once")
        n_rows_node = grid_axes[grid_axis]
        grid_fn = c.grid_expression(launch)
        if isinstance(grid_fn, cst.Lambda) and grid_fn.params.params[0].name.value in c.names_in(n_rows_node):
            raise ActionError("the grid's row count reads the grid lambda's meta-parameters")
        if not _pure_host(n_rows_node):
            raise ActionError("the grid's row count is not a plain expression (names, shapes, arithmetic)")
        if any(a.star for a in launch.call.args):
            raise ActionError("the launch unpacks arguments with * or **")
        launch_line = _statement_holding(launch.host, launch.call)
        if launch_line is None:
            raise ActionError("cannot find the statement that holds the launch")
        n_rows_src = c.code(n_rows_node).strip()
        sources = c.launch_sources(launch, kernel)
        flat = "".join(n_rows_src.split())
        n_rows_param = next((p.name for p in kernel.params if p.kind != "constexpr" and sources.get(p.name) == flat
                             and not _rebound(kdef, p.name)), None)
        col_src = self._col_source(launch, kernel, col_block)
        tuned_col = _tuned_column(launch, kernel, col_block) if tuned else None
        if tuned and tuned_col is None:
            raise ActionError(f"the configs set blocks but not always {col_block}, and the launch passes none: "
                              "the row block's heuristic cannot read it")
        if col_src is None and not tuned:  # tuned: the heuristic reads the config's column block, not the host
            raise ActionError(f"the launch computes {col_block} in a way the host cannot reuse")
        others = [e for i, e in enumerate(grid_axes) if i != grid_axis]
        # The other axes' counts say how many programs a row block gives; left out when not plain (fewer rows a program then).
        other_counts = [c.code(e).strip() for e in others] if all(_pure_host(e) for e in others) else []
        # A program id named for columns (``col = tl.program_id(0)``) reduces down columns: the same
        # rewrite, with the names of that orientation.
        index_name = pid_binding.targets[0].target.value if pid_binding is not None else "row"
        taken, axis, block_m = _row_block_names(module, kernel, kdef, launch, index_name)
        names = {
            "axis": axis,
            "BLOCK_M": block_m,
            "row_mask": next(n for n in (f"{axis}_mask", f"{axis}s_mask", f"{axis}_in_bounds", f"_{axis}_mask") if n not in taken),
            "rows": next(n for n in (f"{axis}s", f"{axis}_ids", f"_{axis}s") if n not in taken),
            "n_rows": n_rows_param or next(n for n in (f"n_{axis}s", f"num_{axis}s", f"n_{axis}s_total") if n not in taken),
        }
        return _Plan(kdef, launch, launch_line, infer.kinds, {k: v[1] for k, v in widen.items()}, infer.pid_calls,
                     pid_binding, col_block, col_src, n_rows_src, n_rows_param, names, tl, triton, prefix,
                     grid_axis, n_rows_node, other_counts, infer.row_reductions > 0, len(grid_axes), infer.row_scans > 0,
                     tuned_col=tuned_col)

    def _plan_grid_stride(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel, kdef: cst.FunctionDef, launch: c.LaunchNode,
                          stride: _grid_stride.GridStride, tl: str, triton: str, prefix: dict[str, str],
                          device_fns: dict[str, tuple[cst.FunctionDef, Kernel]]) -> _Plan:
        """The plan for a persistent kernel: its loop body inferred as a one-row-per-program body, the grid left alone."""
        model = kernel_model(analysis, kernel)
        infer, widen = self._infer(_grid_stride.as_row_kernel(kdef, stride, tl), kernel, prefix, stride.axis, device_fns, model,
                                   {loop.var for loop in model.loops if loop.var is not None and loop.var.name == stride.row})
        col_block = next(iter(infer.blocks))
        if launch.host is None:
            raise ActionError("the launch is at module level")
        if any(a.star for a in launch.call.args):
            raise ActionError("the launch unpacks arguments with * or **")
        launch_line = _statement_holding(launch.host, launch.call)
        if launch_line is None:
            raise ActionError("cannot find the statement that holds the launch")
        # The host sizes the row block from the row count: the loop's stop must be an argument the launch passes plainly.
        stop = stride.stop
        param = stop.value if isinstance(stop, cst.Name) and kernel.param(stop.value) is not None else None
        arg = next((a for a in launch.call.args if c.arg_param(a, launch.call, kernel) == param), None) if param else None
        if arg is None or not _pure_host(arg.value) or _rebound(kdef, param):
            raise ActionError(f"the grid-stride loop runs to `{c.code(stop)}`, which is not a kernel argument the launch "
                              "passes as a plain expression: the host cannot size the row block")
        col_src = self._col_source(launch, kernel, col_block)
        if col_src is None:
            raise ActionError(f"the launch computes {col_block} in a way the host cannot reuse")
        taken, axis, block_m = _row_block_names(module, kernel, kdef, launch, stride.row)
        names = {
            "axis": axis,
            "BLOCK_M": block_m,
            "row_mask": next(n for n in (f"{axis}_mask", f"{axis}s_mask", f"{axis}_in_bounds", f"_{axis}_mask") if n not in taken),
            "row_block": next(n for n in (f"{axis}_block", f"{axis}_block_start", f"_{axis}_block") if n not in taken),
            "rows": stride.row,
            "n_rows": param,
        }
        grid_axes = self._grid_axes(launch)
        return _Plan(kdef, launch, launch_line, infer.kinds, {k: v[1] for k, v in widen.items()}, infer.pid_calls,
                     None, col_block, col_src, c.code(arg.value).strip(), param, names, tl, triton, prefix,
                     stride.axis, arg.value, [], infer.row_reductions > 0, len(grid_axes) if grid_axes else 1,
                     infer.row_scans > 0, stride=stride)

    @staticmethod
    def _infer(kdef: cst.FunctionDef, kernel: Kernel, prefix: dict[str, str], grid_axis: int,
               device_fns: dict[str, tuple[cst.FunctionDef, Kernel]], model: KernelModel,
               rows: set) -> tuple[_Infer, dict[int, tuple[int, str]]]:
        """The kinds with ``tl.program_id(grid_axis)`` as the row index, or why that axis is not one (``rows``: the
        kernel model's symbols for the row index, whose stores it asks about)."""
        widen: dict[int, tuple[int, str]] = {}
        for _ in range(4):  # again after each widened accumulator: what reads it before the loop widens too
            infer = _Infer(kernel, prefix, widen, grid_axis, device_fns)
            infer.block(kdef.body.body, {})
            if not infer.promote.keys() - widen.keys():
                break
            widen.update(infer.promote)
        else:
            raise ActionError("the loop accumulators do not settle")
        if not infer.pid_calls:
            raise ActionError(f"the kernel does not use tl.program_id({grid_axis})")
        if len(infer.blocks) != 1:
            raise ActionError(f"needs exactly one column block (the aranges span {', '.join(sorted(infer.blocks))})"
                              if infer.blocks else "no `tl.arange(0, BLOCK)` over the row")
        if not infer.stores:
            raise ActionError("the kernel stores nothing per row")
        if infer.decompositions or infer.clamps:
            # Each row must still store at its own addresses: every store's index determines the whole row index
            # (``pid * stride``, or ``pid // C`` together with ``pid % C``), not ``pid // 2`` or ``min(pid, 5)`` alone.
            for store in model.stores():
                if not model.pins(store.offset, rows):
                    raise ActionError(f"`{store.source}` reaches the row index only through `//` or `%` without the other "
                                      "half (`i // D` needs `i % D`), or through min/max: rows would share its addresses")
        shared = _written_and_read(kdef, kernel, prefix)
        if shared:
            raise ActionError(f"stores through {', '.join(sorted(shared))}, which it also loads: rows could read other rows' results")
        steps = _block_steps(model, rows) & infer.blocks
        if not infer.row_reductions and steps:
            # An elementwise kernel whose program id steps by its own block (``pid * BLOCK + tl.arange(0, BLOCK)``)
            # is flat, not a row kernel: a bigger block (tiling) says the same. Elementwise row kernels
            # (the id times a row stride) gain from several narrow rows per program.
            raise ActionError(f"no reduction over the row, and the program id steps by the block {', '.join(sorted(steps))} "
                              "itself: a flat elementwise kernel (tiling makes its block bigger)")
        return infer, widen

    @staticmethod
    def _grid_axes(launch: c.LaunchNode) -> list[cst.BaseExpression] | None:
        """The grid's counts, one per axis, when the grid is (or names) a literal tuple."""
        grid = c.grid_expression(launch)
        if isinstance(grid, cst.Lambda) and len(grid.params.params) == 1:
            grid = grid.body  # ``lambda META: (M,)`` (FlagGems' autotuned kernels): the tuple it returns; the lambda stays
        if not isinstance(grid, cst.Tuple) or not grid.elements or any(isinstance(e, cst.StarredElement) for e in grid.elements):
            return None
        return [e.value for e in grid.elements]

    @staticmethod
    def _device_fns(module: cst.Module, analysis: FileAnalysis, kernel: Kernel) -> dict[str, tuple[cst.FunctionDef, Kernel]]:
        """The file's other @triton.jit functions, by name, that the kernel could call."""
        out: dict[str, tuple[cst.FunctionDef, Kernel]] = {}
        for other in analysis.kernels:
            if other.name == kernel.name or other.autotune is not None or other.heuristics:
                continue
            try:
                fdef, _ = c.locate(module, other.name)
            except (ActionError, IndexError):
                continue
            out[other.name] = (fdef, other)
        return out

    @staticmethod
    def _pid_binding(kdef: cst.FunctionDef, pid_calls: list[cst.Call]) -> cst.Assign | None:
        """``row = tl.program_id(0)`` (or ``.to(tl.int64)``) at the top level, before any other use of the id."""
        for statement in kdef.body.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                return None
            for small in statement.body:
                if not any(_contains(small, p) for p in pid_calls):
                    continue
                if isinstance(small, cst.Assign) and isinstance(small.targets[0].target, cst.Name):
                    value = small.value
                    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in c.SHAPE_METHODS:
                        value = value.func.value
                    name = small.targets[0].target.value
                    if any(value is p for p in pid_calls) and not _rebound(kdef, name, allowed=1):
                        return small
                return None
        return None

    @staticmethod
    def _col_source(launch: c.LaunchNode, kernel: Kernel, block: str) -> str | None:
        """What the host can read for the column block at the launch: a literal, a name or a plain expression."""
        arg = next((a for a in launch.call.args if c.arg_param(a, launch.call, kernel) == block), None)
        if arg is None:
            p = kernel.param(block)
            return str(p.default_value) if p is not None and isinstance(p.default_value, int) else None
        if _pure_host(arg.value):
            return c.code(arg.value).strip()
        return None

    def _options(self, plan: _Plan) -> list[dict[str, Value]]:
        return [{"TILE": tile} for tile in TILES]

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            plan = self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError:
            _remember_facts(analysis, kernel, None)
            return []
        _remember_facts(analysis, kernel, plan)
        return [Candidate(self.name, self.kind, kernel.name, params,
                          f"Several {plan.names['axis']}s per program: [{plan.names['BLOCK_M']}, {plan.col_block}] tiles "
                          f"(about {params['TILE']} elements, "
                          f"{'warps as each config sets them' if plan.tuned_col else str(TILES[params['TILE']]) + ' warps'}), "
                          + ("the grid-stride loop takes them, grid unchanged" if plan.stride is not None else
                             f"grid cdiv({plan.n_rows_src}, {plan.names['BLOCK_M']})"), c.kernel_line(kernel))
                for params in self._options(plan)]

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile | None = None) -> str | None:
        """Why the action is not offered for ``kernel`` (None when it is)."""
        try:
            self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError as exc:
            return str(exc)
        return None

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        module = c.parse(text)
        plan = self._plan(module, analysis, kernel)
        if params not in self._options(plan):
            raise ActionError(f"rows_per_program takes TILE in {sorted(TILES)}, got {params}")
        tile = int(params["TILE"])
        n, tl = plan.names, plan.tl
        block_m = n["BLOCK_M"]
        rewrite = _Rewrite(plan)
        pairs: list[tuple[cst.CSTNode, object]] = []
        # The kernel: every statement rebuilt from the kinds, the row mask right after the row index.
        if plan.stride is not None:
            # Persistent: the statements before the loop are row-independent and stay; the rewritten loop starts
            # with the row vector and its mask.
            loop_body = self._block(plan.stride.loop.body.body, rewrite)
            body = [*plan.kdef.body.body[:-1], _grid_stride.rewritten_loop(plan.stride, loop_body, n, tl)]
        elif plan.pid_binding is not None:
            body = self._block(plan.kdef.body.body, rewrite)
            row_name = plan.pid_binding.targets[0].target.value
            index = next(i for i, s in enumerate(plan.kdef.body.body) if isinstance(s, cst.SimpleStatementLine)
                         and any(b is plan.pid_binding for b in s.body))
            body.insert(index + 1, c.stmt(f"{n['row_mask']} = {row_name} < {n['n_rows']}"))
        else:  # the id is used inline: name the row vector once at the top
            rows_line = c.stmt(f"{n['rows']} = {c.code(rewrite.rows_expr)}")
            rewrite.rows_expr = cst.Name(n["rows"])
            body = self._block(plan.kdef.body.body, rewrite)
            first = 1 if c.is_docstring(body[0]) else 0
            body[first:first] = [rows_line.with_changes(leading_lines=body[first].leading_lines),
                                 c.stmt(f"{n['row_mask']} = {n['rows']} < {n['n_rows']}")]
            body[first + 2] = body[first + 2].with_changes(leading_lines=[])
        kparams = list(plan.kdef.params.params)
        first_constexpr = next((p.index for p in kernel.params if p.kind == "constexpr"), len(kparams))
        if plan.n_rows_param is None:
            if any(p.default is not None for p in kparams[:first_constexpr]):
                raise ActionError("a kernel argument before the constexprs has a default")
            kparams = _insert_param(kparams, first_constexpr, cst.Param(cst.Name(n["n_rows"])))
        needs_default = kparams[-1].default is not None
        kparams = _insert_param(kparams, len(kparams), cst.Param(
            cst.Name(block_m), annotation=cst.Annotation(c.expr(f"{tl}.constexpr")),
            default=cst.Integer("1") if needs_default else None,
            equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(" "), whitespace_after=cst.SimpleWhitespace(" "))
            if needs_default else cst.MaybeSentinel.DEFAULT))
        new_kdef = plan.kdef.with_changes(params=plan.kdef.params.with_changes(params=kparams),
                                          body=plan.kdef.body.with_changes(body=body))
        if plan.tuned_col is not None:
            new_kdef = new_kdef.with_changes(decorators=_with_row_heuristic(new_kdef.decorators, plan, tile, target))
        pairs.append((plan.kdef, new_kdef))
        # The host: BLOCK_M from the row block and the target's SMs, the grid over row blocks (a persistent grid stays).
        call = plan.launch.call
        grid = call.func.slice[0].slice.value
        # Autotuned over blocks: BLOCK_M is known only once a config is chosen, so the grid reads it from META.
        grid_fn = c.grid_expression(plan.launch)
        lambda_meta = grid_fn.params.params[0].name.value if isinstance(grid_fn, cst.Lambda) else None
        meta = lambda_meta or next(m for m in ("META", "meta", "_META") if m not in c.names_in(plan.n_rows_node)
                                   and all(m not in x for x in plan.other_counts))
        row_block = f'{meta}["{block_m}"]' if plan.tuned_col is not None else block_m
        row_count = c.expr(f"{plan.triton}.cdiv({plan.n_rows_src}, {row_block})")
        if plan.stride is not None:
            new_grid = grid
        elif isinstance(grid, cst.Tuple):
            new_grid = grid.with_changes(elements=[e.with_changes(value=row_count) if i == plan.grid_axis else e
                                                   for i, e in enumerate(grid.elements)])
        else:  # ``grid = (...)`` then ``kernel[grid]``: the new grid is written at the launch
            new_grid = c.private_grid(plan.launch, {id(plan.n_rows_node): row_count})
            assign = c.host_assignment(plan.launch.host, grid.value) if isinstance(grid, cst.Name) else None
            line = c.statement_holding(plan.launch.host, assign) if assign is not None else None
            if line is not None and len(line.body) == 1 and c.count_name(plan.launch.host, grid.value) == 2 \
                    and not any(ll.comment for ll in line.leading_lines):
                pairs.append((line, cst.RemovalSentinel.REMOVE))  # read by this launch only: it would be left unused
        if plan.tuned_col is not None and lambda_meta is None:
            body = c.code(new_grid).strip()
            new_grid = c.expr(f"lambda {meta}: {body if body.startswith('(') else f'({body})'}")
        new_call = call.with_changes(func=call.func.with_changes(
            slice=[call.func.slice[0].with_changes(slice=call.func.slice[0].slice.with_changes(value=new_grid))]))
        if plan.n_rows_param is None:
            new_call = _add_arg(new_call, first_constexpr, n["n_rows"], c.expr(plan.n_rows_src))
        # A literal (or default) column block gets a host name that BLOCK_M reads too, so a later
        # retiling step, which rewrites that one constant, keeps BLOCK_M * BLOCK_N at the tile.
        col, named = plan.col_src, None
        col_arg = next((a for a in call.args if c.arg_param(a, call, kernel) == plan.col_block), None)
        if plan.tuned_col is not None:
            line = c.replace_all(plan.launch_line, [(call, new_call)])
            pairs.append((plan.launch_line, line))
            module = c.replace_all(module, pairs)
            return c.finish(text, module, f"{block_m} rows per program in {kernel.name}: [{block_m}, {plan.col_block}] tiles "
                            f"for each autotune config, grid cdiv({plan.n_rows_src}, {block_m})",
                            [(f"@triton.heuristics picks {block_m} from the config's {plan.col_block}: about {tile} elements a "
                              f"tile, at least ~{PROGRAMS_PER_SM} programs per SM ({target.sm_count} SMs on {target.name}); "
                              "the configs and the autotune key stay as they are"),
                             *([(f"{n['n_rows']} (the grid's {plan.n_rows_src}) is a new kernel argument that masks the last "
                                 "row block")] if plan.n_rows_param is None else [])])
        if col.isdigit() and (col_arg is None or isinstance(col_arg.value, cst.Integer)):
            named = next((h for h in (plan.col_block, f"{plan.col_block}_SIZE") if count_free(plan.launch, h)
                          and h != block_m), None)
        if named is not None:
            if col_arg is not None and col_arg.keyword is None:
                index = list(call.args).index(col_arg)
                args = list(new_call.args)
                shift = len(args) - len(call.args) if plan.n_rows_param is None and index >= first_constexpr else 0
                args[index + shift] = args[index + shift].with_changes(value=cst.Name(named))
                new_call = new_call.with_changes(args=args)
            else:
                new_call = _kwarg_before_options(new_call, plan.col_block, cst.Name(named)) if col_arg is None else \
                    c.set_kwarg(new_call, plan.col_block, cst.Name(named))
        new_call = _kwarg_before_options(new_call, block_m, cst.Name(block_m))
        if kernel.autotune is None:  # an autotuned kernel's configs choose the warps
            old_warps = c.kwarg(call, "num_warps")
            old_src = c.code(old_warps.value).strip() if old_warps is not None else str(c.DEFAULT_NUM_WARPS)
            warps = TILES[tile]
            warps_src = str(warps) if old_src == str(warps) else f"{warps} if {block_m} > 1 else {old_src}"
            new_call = c.set_kwarg(new_call, "num_warps", c.expr(warps_src))
        if named is not None:
            per_tile = f"{tile} // {named}"
        elif col.isdigit():
            per_tile = str(max(tile // int(col), 1))
        else:
            per_tile = f"{tile} // {col if _atomic(col) else f'({col})'}"
        cap = PROGRAMS_PER_SM * target.sm_count
        host_lines = [c.stmt(f"{named} = {col}")] if named is not None else []
        if plan.other_counts:
            # Programs come from every axis; a block never takes more rows than its axis has.
            programs = " * ".join(x if _atomic(x) else f"({x})" for x in [plan.n_rows_src, *plan.other_counts])
            host_lines.append(c.stmt(f"{block_m} = max(1, min({per_tile}, {plan.triton}.next_power_of_2({plan.n_rows_src}), "
                                     f"{plan.triton}.next_power_of_2({plan.triton}.cdiv({programs}, {cap}))))"))
        else:
            # A persistent kernel keeps its grid, so this floor no longer sets how many programs run; it keeps
            # how many row blocks there are to share out: about PROGRAMS_PER_SM per SM (at least half that after
            # rounding), so every program of a grid sized to the SMs (the usual NUM_SMS * k) still gets row
            # blocks, whatever the host computes for that grid (often from occupancy, which the file cannot say).
            host_lines.append(c.stmt(f"{block_m} = max(1, min({per_tile}, {plan.triton}.next_power_of_2("
                                     f"{plan.triton}.cdiv({plan.n_rows_src}, {cap}))))"))
        host_lines[0] = host_lines[0].with_changes(leading_lines=plan.launch_line.leading_lines)
        line = c.replace_all(plan.launch_line, [(call, new_call)])
        pairs.append((plan.launch_line, cst.FlattenSentinel([*host_lines, line.with_changes(leading_lines=[])])))
        module = c.replace_all(module, pairs)
        notes = [(f"{block_m} rows per program: about {tile} elements a tile, at least ~{PROGRAMS_PER_SM} programs "
                  f"per SM ({target.sm_count} SMs on {target.name}); rows as wide as the tile keep one row a program")]
        if plan.n_rows_param is None:
            notes.append(f"{n['n_rows']} (the grid's {plan.n_rows_src}) is a new kernel argument that masks the last row block")
        if plan.stride is not None:
            notes[0] = (f"{block_m} rows per trip of the grid-stride loop: about {tile} elements a tile, at least "
                        f"~{PROGRAMS_PER_SM} row blocks per SM ({target.sm_count} SMs on {target.name}); the grid stays")
            return c.finish(text, module, f"{block_m} rows per trip of {kernel.name}'s grid-stride loop: [{block_m}, "
                            f"{plan.col_block}] tiles, {'reductions over axis 1, ' if plan.reduces else ''}the grid unchanged",
                            notes)
        axis_note = f" on grid axis {plan.grid_axis}" if plan.other_counts or plan.grid_axis else ""
        return c.finish(text, module, f"{block_m} rows per program in {kernel.name}: [{block_m}, {plan.col_block}] tiles, "
                        f"{'reductions over axis 1, ' if plan.reduces else ''}grid cdiv({plan.n_rows_src}, {block_m}){axis_note}", notes)

    def _statement(self, statement: cst.BaseStatement, rewrite: _Rewrite) -> cst.BaseStatement:
        if isinstance(statement, cst.SimpleStatementLine):
            return statement.with_changes(body=[self._small(s, rewrite) for s in statement.body])
        if isinstance(statement, cst.If):
            orelse = statement.orelse
            if isinstance(orelse, cst.If):
                orelse = self._statement(orelse, rewrite)
            elif isinstance(orelse, cst.Else):
                orelse = orelse.with_changes(body=orelse.body.with_changes(body=self._block(orelse.body.body, rewrite)))
            return statement.with_changes(body=statement.body.with_changes(body=self._block(statement.body.body, rewrite)),
                                          orelse=orelse)
        if isinstance(statement, cst.For):
            return statement.with_changes(body=statement.body.with_changes(body=self._block(statement.body.body, rewrite)))
        return statement

    def _block(self, statements, rewrite: _Rewrite) -> list[cst.BaseStatement]:
        """The rewritten statements of one block, each loop's reduced accumulators read once after it."""
        out = []
        for index, statement in enumerate(statements):
            out.append(self._statement(statement, rewrite))
            if isinstance(statement, cst.For):
                out.extend(_read_once(name, reduction, rewrite.plan) for name, reduction in
                           _reduced_accumulators(statement, statements[:index], rewrite.plan)
                           if c.count_name(cst.Module(body=list(statements[index + 1:])), name) > 1)
        return out

    def _small(self, small: cst.BaseSmallStatement, rewrite: _Rewrite) -> cst.BaseSmallStatement:
        plan = rewrite.plan
        if isinstance(small, cst.Assign):
            spelled = plan.promote.get(id(small.value))
            if spelled is not None:
                return small.with_changes(value=c.expr(spelled.replace("{M}", plan.names["BLOCK_M"]).replace("{tl}", plan.tl)))
            return small.with_changes(value=rewrite.rw(small.value, rewrite.kind(small.value) == RC))
        if isinstance(small, cst.AugAssign):
            wide = rewrite.kind(small.target) == RC
            return small.with_changes(value=rewrite.rw(small.value, wide))
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            return small.with_changes(value=rewrite.memory(small.value, "store", S))
        return small


def _with_row_heuristic(decorators, plan: _Plan, tile: int, target: GpuProfile) -> list[cst.Decorator]:
    """The decorators with ``@triton.heuristics({"BLOCK_M": ...})`` right above ``@triton.jit``.

    Why a heuristic and not a BLOCK_M in every config: Triton's Autotuner calls the function under it with
    the chosen config's kwargs (``Autotuner.run`` -> ``self.fn.run(*args, **config.all_kwargs())``), and
    ``Heuristics.run`` then computes its values from those arguments, so BLOCK_M follows whichever column
    block wins, for literal configs and generated ones alike, while the configs, their count and the
    autotune key stay as written. It also keeps the programs-per-SM floor, which reads the row count of
    each call: a BLOCK_M fixed in a config could not, and the key (the row width) does not hold the row
    count. The configs are benchmarked with their row block, so the tuner still times what will run. Each config's
    warps stay its own (they are what it tunes): its tile stays within ELEMENTS_PER_WARP per warp (``args`` holds the
    config's ``num_warps``), so a 2-warp config with a narrow block does not take a tile meant for 8 warps.
    Other grid axes are left out of the floor (their counts are host values): fewer rows a program at worst.
    """
    n = plan.names
    cap = PROGRAMS_PER_SM * target.sm_count
    rows = f'args["{n["n_rows"]}"]'
    value = (f'lambda args: max(1, min(min({tile}, {ELEMENTS_PER_WARP} * args.get("num_warps", {c.DEFAULT_NUM_WARPS})) '
             f"// {plan.tuned_col}, "
             f"{plan.triton}.next_power_of_2({plan.triton}.cdiv({rows}, {cap}))))")
    heuristic = cst.Decorator(decorator=c.expr(f'{plan.triton}.heuristics({{"{n["BLOCK_M"]}": {value}}})'))
    out = list(decorators)
    jit = max(i for i, d in enumerate(out)
              if c.code(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator).split(".")[-1] == "jit")
    out.insert(jit, heuristic)
    return out


def _block_steps(model: KernelModel, rows: set) -> set[str]:
    """The column blocks by which the row index steps a store: ``pid * BLOCK + tl.arange(0, BLOCK)`` (and
    ``start = pid * BLOCK`` then ``start + offs``), read from the kernel model. Such a kernel is flat, however its
    cos table or row stride is indexed: only the stores' addresses say how the programs share the output."""
    steps = set()
    for store in model.stores():
        if store.offset is None:
            continue
        try:
            terms = model.program_terms(store.offset) if rows <= model.program_id_symbols() else {
                s: linear_coefficient(store.offset, s) for s in rows}
        except ValueError:
            continue
        sizes = {model.aranges[a].size for dim in store.dims for a in dim if a in model.aranges}
        for piece, coefficient in terms.items():
            if piece.free_symbols & rows and coefficient in sizes and coefficient.is_Symbol:
                steps.add(coefficient.name)
    return steps


def _tuned_problem(kdef: cst.FunctionDef, kernel: Kernel) -> str | None:
    """Why a kernel autotuned over block sizes cannot take a ``@triton.heuristics`` for its row block (None when it can)."""
    if not kernel.plain_spelling:
        return "the kernel is autotuned over block sizes and jitted by a call: no decorator list for the row block's heuristic"
    names = [c.code(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator).split(".")[-1]
             for d in kdef.decorators]
    if "autotune" not in names or "jit" not in names or names.index("autotune") > names.index("jit"):
        return "the kernel is autotuned over block sizes, but not by @triton.autotune above @triton.jit"
    return None


def _tuned_column(launch: c.LaunchNode, kernel: Kernel, block: str) -> str | None:
    """How the row block's heuristic reads the column block: from the launch or the configs, else the kernel's default."""
    tune = kernel.autotune
    passed = any(c.arg_param(a, launch.call, kernel) == block for a in launch.call.args)
    if passed or (tune is not None and tune.configs_known and all(block in cfg.kwargs for cfg in tune.configs)):
        return f'args["{block}"]'
    param = kernel.param(block)
    if param is not None and isinstance(param.default_value, int) and not isinstance(param.default_value, bool):
        # Heuristics see the launch's arguments and the chosen config, never the defaults.
        return f'args.get("{block}", {param.default_value})'
    if tune is not None and not tune.configs_known:
        return f'args["{block}"]'  # without a default the configs must set it, or no launch would compile
    return None


def _row_block_names(module: cst.Module, kernel: Kernel, kdef: cst.FunctionDef, launch: c.LaunchNode,
                     index_name: str) -> tuple[set[str], str, str]:
    """(names the kernel takes, "row" or "col" by the row index's name, a free name for the row block)."""
    taken = c.names_in(kdef) | {p.name for p in kernel.params}
    host_taken = c.names_in(launch.host) | (c.names_in(module) if launch.module is not None else set())
    axis = "col" if index_name.lower().startswith("col") else "row"
    choices = ("BLOCK_COLS", "COLS_PER_PROGRAM") if axis == "col" else ("BLOCK_M", "BLOCK_ROWS", "ROWS_PER_PROGRAM")
    block_m = next((n for n in choices if n not in taken and n not in host_taken), None)
    if block_m is None:
        raise ActionError(f"{', '.join(choices)} are all taken")
    return taken, axis, block_m


def _reduced_accumulators(loop: cst.For, before: list[cst.BaseStatement] | tuple, plan: _Plan) -> list[tuple[str, str]]:
    """Per-row accumulators (and their reduction) that ``loop`` updates as ``acc = op(acc, tl.sum/max/min(loaded, axis=1))``.

    Triton 3.6's OptimizeThreadLocality pass rewrites such a loop (a constant start, a reduction of a
    load into a float accumulator) and asserts that the loop's result has a single use
    (``loopResult.hasOneUse()``): read twice after the loop (a 3-pass log_softmax's row maximum), the
    compile fails with "PassManager::run failed". Triton 3.9 compiles it. (A single read through
    ``tl.reshape`` or ``[:, None]`` is not enough: the layout passes before it fold that away again.)
    """
    loaded = {n.targets[0].target.value for n in _smalls(loop.body.body) if isinstance(n, cst.Assign)
              and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name) and _is_load(n.value, plan)}
    starts = {n.targets[0].target.value: n.value for n in _smalls(before) if isinstance(n, cst.Assign)
              and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name)}

    def reduces_load(node: cst.BaseExpression) -> str | None:
        reduction = _tl_name(node.func, plan.prefix) if isinstance(node, cst.Call) else None
        value = _arg(node, 0, "input") if reduction in ("sum", "max", "min") else None
        if value is not None and ((isinstance(value.value, cst.Name) and value.value.value in loaded) or _is_load(value.value, plan)):
            return reduction
        return None

    found: list[tuple[str, str]] = []
    for small in _smalls(loop.body.body):
        if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name) and \
                isinstance(small.operator, cst.AddAssign | cst.MultiplyAssign) and reduces_load(small.value):
            name, reduction = small.target.value, reduces_load(small.value)
        elif isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
            name, value = small.targets[0].target.value, small.value
            if isinstance(value, cst.Call) and _tl_name(value.func, plan.prefix) in ("maximum", "minimum"):
                operands = [a.value for a in value.args if a.keyword is None]
            elif isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add | cst.Multiply):
                operands = [value.left, value.right]
            else:
                continue
            reduction = next((r for r in map(reduces_load, operands) if r is not None), None)
            if len(operands) != 2 or not any(isinstance(o, cst.Name) and o.value == name for o in operands) or reduction is None:
                continue
        else:
            continue
        start = starts.get(name)
        spelled = plan.promote.get(id(start)) if start is not None else None  # a constant widened to [BLOCK_M]
        if spelled is not None and "[{M}]" in spelled and "float32" in spelled and name not in dict(found):
            found.append((name, reduction))
    return found


def _smalls(statements) -> list[cst.BaseSmallStatement]:
    return [small for s in statements if isinstance(s, cst.SimpleStatementLine) for small in s.body]


def _is_load(node: cst.BaseExpression, plan: _Plan) -> bool:
    """``tl.load(...)``, maybe followed by ``.to(...)`` (a no-op cast leaves the load as the reduction's input)."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in c.SHAPE_METHODS \
            and _tl_name(node.func, plan.prefix) is None:
        node = node.func.value
    return isinstance(node, cst.Call) and _tl_name(node.func, plan.prefix) == "load"


def _read_once(name: str, reduction: str, plan: _Plan) -> cst.BaseStatement:
    """``acc = tl.max(acc[:, None], axis=1)``: the loop's result has one use (a reduction of one value, exact)."""
    return c.stmt(f"{name} = {plan.tl}.{reduction}({name}[:, None], axis=1)"
                  "  # one read of the loop's result (Triton 3.6 asserts on more)\n")


def _plain_comma(comma: cst.Comma | cst.MaybeSentinel) -> cst.Comma:
    """A parameter's comma without the comment that follows it (that comment describes that parameter)."""
    if not isinstance(comma, cst.Comma):
        return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    after = comma.whitespace_after
    if isinstance(after, cst.ParenthesizedWhitespace):
        after = after.with_changes(first_line=cst.TrailingWhitespace())
    return comma.with_changes(whitespace_after=after)


def _insert_param(params: list[cst.Param], index: int, new: cst.Param) -> list[cst.Param]:
    """``params`` with ``new`` at ``index``, laid out like its neighbours; comments stay with their parameters."""
    params = list(params)
    if index < len(params):
        params.insert(index, new.with_changes(comma=_plain_comma(params[index - 1].comma if index else cst.MaybeSentinel.DEFAULT)))
        return params
    last = params[-1]
    if isinstance(last.comma, cst.Comma) and len(params) > 1:
        # A trailing comma before ``)``: the new parameter takes it; the last one gets the separator of
        # the one before it (same line or next line, indented), keeping its own comment.
        between = _plain_comma(params[-2].comma)
        own = last.comma.whitespace_after
        if isinstance(own, cst.ParenthesizedWhitespace) and isinstance(between.whitespace_after, cst.ParenthesizedWhitespace):
            between = between.with_changes(whitespace_after=between.whitespace_after.with_changes(first_line=own.first_line))
        params[-1] = last.with_changes(comma=between)
        params.append(new.with_changes(comma=_plain_comma(last.comma)))
    else:
        params[-1] = last.with_changes(comma=_plain_comma(params[-2].comma if len(params) > 1 else cst.MaybeSentinel.DEFAULT))
        params.append(new)
    return params


def _written_and_read(kdef: cst.FunctionDef, kernel: Kernel, prefix: dict[str, str]) -> set[str]:
    """Kernel arguments that the kernel both stores through and loads through (their base pointers).

    A base is a bare additive term of the address (``X + row * stride + cols`` -> ``X``), followed
    through local names to their assignments. Rows that write what other rows read are the one
    cross-row dependence the kinds cannot see; refusing shared bases rules it out. Except in place
    (Liger's backward kernels: ``dy = tl.load(DY + cols)`` ... ``tl.store(DY + cols, dx)``): every load
    and store through the base spells the same address from names that no statement after the first
    of them rebinds, so each row reads and writes only its own elements, as with one row a program.
    """
    params = {p.name for p in kernel.params if p.kind != "constexpr"}
    assigned: dict[str, list[cst.BaseExpression]] = {}

    class Assigns(cst.CSTVisitor):
        def visit_Assign(self, n: cst.Assign) -> None:
            for t in n.targets:
                if isinstance(t.target, cst.Name):
                    assigned.setdefault(t.target.value, []).append(n.value)

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            if isinstance(n.target, cst.Name) and isinstance(n.operator, cst.AddAssign | cst.SubtractAssign):
                assigned.setdefault(n.target.value, []).append(n.value)

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            if isinstance(n.target, cst.Name) and n.value is not None:
                assigned.setdefault(n.target.value, []).append(n.value)

    kdef.body.visit(Assigns())

    def bases(node: cst.BaseExpression, seen: frozenset[str] = frozenset()) -> set[str]:
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add | cst.Subtract):
            return bases(node.left, seen) | bases(node.right, seen)
        if isinstance(node, cst.Name) and node.value not in seen:
            found = {node.value} & params
            for value in assigned.get(node.value, []):
                found |= bases(value, seen | {node.value})
            return found
        return set()

    loads: set[str] = set()
    stores: set[str] = set()
    # base -> (the whitespace-free address of each access through it, the first top-level statement holding one)
    accesses: dict[str, tuple[set[str], int]] = {}
    # name -> the last top-level statement that binds it (nested bindings count as never settling)
    last_bound: dict[str, int] = {}
    never = len(kdef.body.body)

    class Memory(cst.CSTVisitor):
        def __init__(self, index: int):
            self.index = index

        def visit_Call(self, n: cst.Call) -> None:
            op = _tl_name(n.func, prefix)
            pointer = _arg(n, 0, "pointer") if op in ("load", "store") else None
            if pointer is not None:
                found = bases(pointer.value)
                (loads if op == "load" else stores).update(found)
                for base in found:
                    texts, first = accesses.get(base, (set(), self.index))
                    texts.add("".join(c.code(pointer.value).split()))
                    accesses[base] = (texts, min(first, self.index))

    for index, statement in enumerate(kdef.body.body):
        statement.visit(Memory(index))
        top = isinstance(statement, cst.SimpleStatementLine)
        for small in statement.body if top else ():
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else \
                [small.target] if isinstance(small, cst.AugAssign | cst.AnnAssign) else []
            for name in set().union(*(c.names_in(t) for t in targets)):
                last_bound[name] = index
        if not top:
            for name in c.bound_names(statement):
                last_bound[name] = never

    def in_place(base: str) -> bool:
        texts, first = accesses[base]
        if len(texts) != 1:
            return False
        return all(last_bound.get(name, -1) < first for name in c.names_in(c.expr(next(iter(texts)))))

    return {base for base in loads & stores if not in_place(base)}


def _atomic(source: str) -> bool:
    """True when ``source`` needs no parentheses as an operand (a name, number, call or attribute)."""
    node = c.expr(source)
    return isinstance(node, cst.Name | cst.Integer | cst.Call | cst.Attribute | cst.Subscript)


def _contains(root: cst.CSTNode, node: cst.CSTNode) -> bool:
    found = False

    class V(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            nonlocal found
            found = found or n is node
            return not found

    root.visit(V())
    return found


def _rebound(kdef: cst.FunctionDef, name: str, allowed: int = 0) -> bool:
    """True when the kernel assigns ``name`` more than ``allowed`` times (any assignment form)."""
    count = 0

    class V(cst.CSTVisitor):
        def visit_AssignTarget(self, n: cst.AssignTarget) -> None:
            nonlocal count
            count += name in c.names_in(n.target)

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            nonlocal count
            count += name in c.names_in(n.target)

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            nonlocal count
            count += n.value is not None and name in c.names_in(n.target)

        def visit_For(self, n: cst.For) -> None:
            nonlocal count
            count += name in c.names_in(n.target)

    kdef.body.visit(V())
    return count > allowed


def _stable(host: cst.FunctionDef, name: str) -> bool:
    """True when ``name`` has one value throughout the host function (bound once, or not at all there)."""
    # ``total, heads, dim = q.shape`` binds each name once too; any second binding (or a parameter bound again) moves it.
    return not _rebound(host, name, allowed=0 if name in c._param_names(host) else 1)


def _pure_host(node: cst.BaseExpression) -> bool:
    """Names, attributes, numbers, arithmetic, subscripts and shape reads: safe to evaluate again."""
    ok = True

    class V(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            nonlocal ok
            if isinstance(n, cst.Call):
                f = n.func
                fname = f.attr.value if isinstance(f, cst.Attribute) else f.value if isinstance(f, cst.Name) else ""
                ok = ok and fname in _HOST_CALLS and not any(a.star for a in n.args)
            elif isinstance(n, cst.BaseExpression) and not isinstance(
                    n, cst.Name | cst.Attribute | cst.Subscript | cst.Integer | cst.BinaryOperation | cst.UnaryOperation | cst.Call):
                ok = False
            return ok

    node.visit(V())
    return ok


def _statement_holding(root: cst.CSTNode, node: cst.CSTNode) -> cst.BaseStatement | None:
    """The innermost statement line that holds ``node`` (where the BLOCK_M line goes in front of)."""
    found: list[cst.BaseStatement] = []

    class V(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, n: cst.SimpleStatementLine) -> bool:
            if _contains(n, node):
                found.append(n)
            return False

    root.visit(V())
    return found[0] if found else None


def _add_arg(call: cst.Call, index: int, keyword: str, value: cst.BaseExpression) -> cst.Call:
    """Pass ``value`` as the kernel's parameter number ``index``: positionally where the launch reaches it, else by keyword."""
    args = list(call.args)
    positional = [i for i, a in enumerate(args) if a.keyword is None]
    if 0 < index <= len(positional):
        at = positional[index - 1] + 1
        new = cst.Arg(value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        if at == len(args):  # appended last: the previous argument needs a comma, the new one takes its
            new = new.with_changes(comma=args[at - 1].comma)
            args[at - 1] = args[at - 1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        else:
            new = new.with_changes(comma=args[at - 1].comma if isinstance(args[at - 1].comma, cst.Comma) else
                                   cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.insert(at, new)
        return call.with_changes(args=args)
    return _kwarg_before_options(call, keyword, value)


@dataclass(frozen=True)
class RowFacts:
    """What the policy's prior reads about a kernel rows_per_program is offered for (what the gain depends on)."""

    axis: str  # "row", or "col" for one column per program reducing down the rows
    block: int | None  # the elements of a row one program reads at once, when the launch sets a constant
    loops: bool  # the kernel walks its row (or column) in blocks
    reduces: bool = True  # it reduces or scans along the row (else an elementwise row kernel: nothing shared between a row's lanes)
    grid_dims: int = 1  # the launch grid's axes: the row axis is one of them
    persistent: bool = False  # a grid-stride loop walks the rows (``loops`` then counts only the loops inside it)


# id(analysis) -> (a weak reference to it, kernel name -> facts or None when not offered): filled by
# candidates() and row_facts(), read by the heuristic policy for every candidate it ranks. An entry
# neither keeps its analysis alive nor outlives it (a finalizer drops it, so a reused id finds nothing),
# and the weak reference is checked too. FileAnalysis is an unhashable dataclass: no WeakKeyDictionary.
_FACTS: dict[int, tuple[weakref.ref, dict[str, RowFacts | None]]] = {}


def _facts_of(analysis: FileAnalysis) -> dict[str, RowFacts | None]:
    """The facts cached for this very analysis object (an empty table, registered, the first time)."""
    key = id(analysis)
    hit = _FACTS.get(key)
    if hit is not None and hit[0]() is analysis:
        return hit[1]
    table: dict[str, RowFacts | None] = {}
    _FACTS[key] = (weakref.ref(analysis), table)
    weakref.finalize(analysis, _forget, key, table)
    return table


def _forget(key: int, table: dict) -> None:
    hit = _FACTS.get(key)
    if hit is not None and hit[1] is table:  # not a newer analysis's entry under a reused id
        del _FACTS[key]


def _remember_facts(analysis: FileAnalysis, kernel: Kernel, plan: _Plan | None) -> RowFacts | None:
    facts = None
    if plan is not None:
        launches = analysis.launches_of(kernel.name)
        block = launches[0].constexpr_values(kernel).get(plan.col_block) if launches else None
        # A persistent kernel's own grid-stride loop is not a walk along the row.
        loops = any(loop.depth > 1 for loop in kernel.loops) if plan.stride is not None else bool(kernel.loops)
        facts = RowFacts(plan.names["axis"], block if isinstance(block, int) and not isinstance(block, bool) else None,
                         loops, plan.reduces or plan.scans, plan.grid_dims, plan.stride is not None)
    _facts_of(analysis)[kernel.name] = facts
    return facts


def row_facts(analysis: FileAnalysis, kernel: Kernel) -> RowFacts | None:
    """The row facts of a kernel the action is offered for (None when it is not)."""
    table = _facts_of(analysis)
    if kernel.name in table:
        return table[kernel.name]
    try:
        plan = ACTION._plan(c.parse(analysis.text), analysis, kernel)
    except ActionError:
        plan = None
    return _remember_facts(analysis, kernel, plan)


ACTION = RowsPerProgram()
