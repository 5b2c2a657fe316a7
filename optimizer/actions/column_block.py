"""Column block: a column reduction with one program per column takes a block of adjacent columns.

One program per column reads one element per row with a row stride between them: every load is
uncoalesced (on the H200 the naive column sum reached 19% of the memory floor). Each program
instead takes ``BLOCK_COLS`` adjacent columns, so each loop iteration loads a [rows, BLOCK_COLS]
tile whose rows are contiguous in memory (coalesced), and keeps a vector of column sums.
Offered when the program id is bound once to a name used only as a unit-stride additive offset of
the loads and of one unmasked scalar store, the loop's loads are 1-D along the rows and reduce with
``tl.sum(..., axis=0)`` into a ``0.0`` accumulator, and the grid is ``(N,)`` with N the columns.

On sm_80 and newer it first offers a row-slab variant: 64-column tiles (256-byte fp32 row segments) leave
a 4096-column matrix only 64 programs, so a second grid axis splits the rows into slabs of
``ROWS_PER_PROGRAM``; each program sums its slab and adds the partial sums into the output with
``tl.atomic_add``, and the host allocates that output with ``torch.zeros``. Offered when the loop is
``range(0, n_rows, BLOCK)``, the stored value is the sum times constants (partial sums add up), and the
output is a fresh ``torch.empty`` of the host, not half precision, unused before the launch.

Example: kernel=col_mean_kernel target=h100 params={"BLOCK_COLS": 64, "BLOCK_R": 128}

```python before
@triton.jit
def col_mean_kernel(src, dst, rows_total, stride, BLOCK_R: tl.constexpr):
    c = tl.program_id(axis=0)
    acc = 0.0
    for r0 in range(0, rows_total, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        v = tl.load(src + r * stride + c, mask=r < rows_total, other=0.0)
        acc += tl.sum(v * v, axis=0)
    tl.store(dst + c, acc / rows_total)


def col_mean_sq(x):
    out = torch.empty(x.shape[1], device=x.device, dtype=x.dtype)
    col_mean_kernel[(x.shape[1],)](x, out, x.shape[0], x.stride(0), BLOCK_R=32)
    return out
```

```python after
@triton.jit
def col_mean_kernel(src, dst, rows_total, stride, n_cols, BLOCK_R: tl.constexpr, BLOCK_COLS: tl.constexpr):
    cols = tl.program_id(axis=0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_mask = cols < n_cols
    acc = tl.zeros([BLOCK_COLS], dtype=tl.float32)
    for r0 in range(0, rows_total, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        v = tl.load(src + r[:, None] * stride + cols[None, :], mask=(r[:, None] < rows_total) & col_mask[None, :], other=0.0)
        acc += tl.sum(v * v, axis=0)
    tl.store(dst + cols, acc / rows_total, mask=col_mask)


def col_mean_sq(x):
    out = torch.empty(x.shape[1], device=x.device, dtype=x.dtype)
    BLOCK_COLS = 64
    col_mean_kernel[(triton.cdiv(x.shape[1], BLOCK_COLS),)](x, out, x.shape[0], x.stride(0), x.shape[1], BLOCK_R=128, BLOCK_COLS=BLOCK_COLS)
    return out
```
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ..analysis import FileAnalysis, Kernel, analyze
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit
from .single_pass import _single_assign

COLS_PARAM = "BLOCK_COLS"
# (BLOCK_COLS, row block) tiles, most programs first. Measured on an H200 (32768x4096 fp32, 4 warps,
# benchmarks/results/h200/column_block_sweep.md): 8x1024 0.194 ms, 16x512 0.200, 32x256 0.282,
# 64x128 1.63 (torch's x.sum(0): 0.143). Narrow column blocks keep thousands of programs in flight;
# 32 or more columns leave a 4096-column matrix 128 programs or fewer for 132 SMs. Tiles stay at
# most 8192 elements (64 fp32 registers per thread over 4 warps); older GPUs get half of that.
TILES: dict[int, list[tuple[int, int]]] = {
    80: [(8, 1024), (16, 512), (32, 256), (64, 128)],
    70: [(8, 512), (16, 256), (32, 128), (64, 64)],
}
SLAB_PARAM = "ROWS_PER_PROGRAM"
# The row-slab variant: each program sums BLOCK_COLS columns over ROWS_PER_PROGRAM rows and adds its partial
# sums into the zeroed output with tl.atomic_add, so a wide tile (64 columns: 256-byte rows, fully coalesced)
# still leaves thousands of programs. H200, col_sum 32768x4096 fp32 (benchmarks/results/h200/suite_tiles):
# 64 columns x 1024 rows in 64-row blocks, 4 warps, 0.133 ms; the best one-slab tile 0.173 ms; torch 0.141.
SLAB_TILE = {SLAB_PARAM: 1024, COLS_PARAM: 64, "row_block": 64}
_LOAD_KWARGS = {"mask", "other", "cache_modifier", "eviction_policy", "volatile"}
_STORE_KWARGS = {"cache_modifier", "eviction_policy"}
_ELEMENTWISE = (cst.Name, cst.Integer, cst.Float, cst.BinaryOperation, cst.UnaryOperation)


@dataclass
class _Plan:
    kdef: cst.FunctionDef
    launch: c.LaunchNode
    launch_line: cst.SimpleStatementLine
    tl: str  # how the kernel spells triton.language
    triton: str  # how the host spells triton
    col: str
    col_assign: cst.SimpleStatementLine
    pid_call: cst.Call
    acc_init: cst.SimpleStatementLine
    loads: list[cst.Call]
    rows: set[str]  # loop-local 1-D row vectors
    store: cst.Call
    row_block: str
    n_cols: str  # source of the grid's N at the launch
    names: dict[str, str]  # fresh names: cols, col_mask, n_cols, slab
    loop: cst.For
    split: str | None  # why the row-slab variant is not offered, or None when it is
    n_rows: str = ""  # source of the loop's row count at the launch (the row-slab variant's grid)
    out_alloc: cst.Call | None = None  # the host's torch.empty(...) of the output (zeroed for the atomic adds)


def _tl_call(node: cst.CSTNode, op: str) -> str | None:
    """The module spelling (``tl``) when ``node`` is ``tl.<op>(...)``."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == op \
            and isinstance(node.func.value, cst.Name):
        return node.func.value.value
    return None


def _zero_axis(call: cst.Call) -> bool:
    """``f(x, 0)`` or ``f(x, axis=0)`` and nothing else."""
    args = list(call.args)
    if len(args) != 2 or args[0].keyword is not None:
        return False
    axis = args[1]
    return (axis.keyword is None or axis.keyword.value == "axis") and isinstance(axis.value, cst.Integer) and axis.value.value == "0"


def _add_terms(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The terms of an addition chain (through parentheses): ``a + (b + c)`` -> [a, b, c]."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return _add_terms(node.left) + _add_terms(node.right)
    return [node]


def _reads_only(node: cst.CSTNode, allowed: set[str]) -> bool:
    """An elementwise expression (names, numbers, arithmetic) over ``allowed`` names only."""
    ok = True

    class V(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            nonlocal ok
            if isinstance(n, cst.BaseExpression) and not isinstance(n, (*_ELEMENTWISE, cst.Comparison)):
                ok = False
            if isinstance(n, cst.Name) and n.value not in allowed:
                ok = False
            return ok

    node.visit(V())
    return ok


def _offset_by(pointer: cst.BaseExpression, col: str, others: set[str]) -> bool:
    """``pointer`` is a sum with ``col`` as one bare term and the rest elementwise over ``others``."""
    terms = _add_terms(pointer)
    bare = [t for t in terms if isinstance(t, cst.Name) and t.value == col and not t.lpar]
    return len(bare) == 1 and all(t is bare[0] or _reads_only(t, others) for t in terms)


class _Rename(cst.CSTTransformer):
    """Replace names by expressions (``rows`` -> ``rows[:, None]``)."""

    def __init__(self, mapping: dict[str, str]):
        self.mapping = mapping

    def leave_Name(self, original_node, updated_node):
        source = self.mapping.get(updated_node.value)
        return c.expr(source) if source is not None else updated_node


class ColumnBlock:
    name = "column_block"
    kind = "Tiling"
    changes_numerics = False

    def _plan(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel) -> _Plan:
        if kernel.is_autotuned or kernel.calls_of("dot", "num_programs", "atomic_add"):
            raise ActionError("the kernel is autotuned, multiplies tiles or counts programs")
        if len(kernel.calls_of("program_id")) != 1:
            raise ActionError("needs exactly one program_id read")
        kdef, launches = c.locate(module, kernel.name)
        if len(launches) != 1 or launches[0].host is None:
            raise ActionError("needs exactly one launch of the kernel, inside a host function")
        params = {p.name for p in kernel.params}
        body = [s for s in kdef.body.body if not (
            isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.Expr)
            and isinstance(s.body[0].value, cst.SimpleString))]  # a docstring
        if len(body) != 4 or not isinstance(body[2], cst.For):
            raise ActionError("needs exactly: col = tl.program_id(0), acc = 0.0, one row loop, one store")
        col_assign, acc_init, loop, store_line = body
        # col = tl.program_id(0)
        pid = _single_assign(col_assign)
        tl = _tl_call(pid[1], "program_id") if pid else None
        if tl is None or len(pid[1].args) != 1 or c.code(pid[1].args[0].value) != "0" or \
                (pid[1].args[0].keyword is not None and pid[1].args[0].keyword.value != "axis"):
            raise ActionError("the first statement is not `col = tl.program_id(0)`")
        col = pid[0]
        if col in params:
            raise ActionError(f"{col} shadows a kernel argument")
        # acc = 0.0
        init = _single_assign(acc_init)
        if init is None or not isinstance(init[1], cst.Float) or float(init[1].value) != 0.0:
            raise ActionError("the accumulator is not initialised as `acc = 0.0`")
        acc = init[0]
        if acc in params | {col}:
            raise ActionError(f"{acc} shadows a kernel argument or the column")
        # for start in range(...): row vectors, loads, acc += tl.sum(expr, axis=0)
        if not isinstance(loop.target, cst.Name) or loop.orelse is not None or not isinstance(loop.iter, cst.Call) \
                or c.code(loop.iter.func) not in ("range", f"{tl}.range"):
            raise ActionError("the loop is not `for v in range(...)`")
        if not all(_reads_only(a.value, params) for a in loop.iter.args if a.keyword is None):
            raise ActionError("the loop bounds are not kernel arguments")
        scalars = params | {loop.target.value}
        rows: set[str] = set()
        loads: list[cst.Call] = []
        loaded: set[str] = set()
        updates = 0
        row_blocks: set[str] = set()
        for statement in loop.body.body:
            single = _single_assign(statement)
            if single is not None and _tl_call(single[1], "load") == tl:
                call = single[1]
                positional = [a for a in call.args if a.keyword is None]
                kwargs = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
                if len(positional) != 1 or set(kwargs) - _LOAD_KWARGS or single[0] in scalars | rows | loaded | {col, acc}:
                    raise ActionError("a load passes its mask positionally or takes block-pointer options")
                if not _offset_by(positional[0].value, col, scalars | rows):
                    raise ActionError(f"a load's address does not add {col} with unit stride to a row offset")
                if "mask" in kwargs and not _reads_only(kwargs["mask"], scalars | rows):
                    raise ActionError("a load's mask reads more than the row offsets")
                if "other" in kwargs and not _reads_only(kwargs["other"], params):
                    raise ActionError("a load's fill value is not a constant")
                loads.append(call)
                loaded.add(single[0])
            elif self._is_update(statement, acc, tl):
                reduced = self._update_value(statement)
                if not _reads_only(reduced, loaded | params):
                    raise ActionError("the summed value is not elementwise over the loads")
                updates += 1
            elif single is not None:
                name, value = single
                calls = c.calls_in(value)
                ok = all(_tl_call(a, "arange") == tl and len(a.args) == 2 and c.code(a.args[0].value) == "0"
                         and isinstance(a.args[1].value, cst.Name) and a.args[1].value.value in kernel.constexpr_names
                         for a in calls)
                reads = c.names_in(_strip_calls(value))
                if not ok or not (calls or reads & rows) or name in scalars | rows | loaded | {col, acc} or \
                        not _reads_only(_strip_calls(value), scalars | rows):
                    raise ActionError(f"{name} is not a 1-D row offset (`start + tl.arange(0, BLOCK)`)")
                row_blocks.update(a.args[1].value.value for a in calls)
                rows.add(name)
            else:
                raise ActionError("the loop holds more than row offsets, loads and `acc += tl.sum(x, axis=0)`")
        if updates != 1 or not loads or len(row_blocks) != 1:
            raise ActionError("needs one `acc += tl.sum(x, axis=0)`, a load and one row block size")
        # tl.store(out_ptr + col, f(acc))
        store = store_line.body[0].value if isinstance(store_line, cst.SimpleStatementLine) and len(store_line.body) == 1 \
            and isinstance(store_line.body[0], cst.Expr) else None
        if _tl_call(store, "store") != tl or [a.keyword for a in store.args[:2]] != [None, None] or \
                any(a.keyword is None or a.keyword.value not in _STORE_KWARGS for a in store.args[2:]):
            raise ActionError("the last statement is not an unmasked `tl.store(out_ptr + col, acc)`")
        if not _offset_by(store.args[0].value, col, params) or not _reads_only(store.args[1].value, params | {acc}):
            raise ActionError(f"the store's address is not `out_ptr + {col}` or its value not elementwise in {acc}")
        # Every statement above reads col and acc only where allowed; this is the safety net.
        if c.count_name(kdef.body, col) != 2 + len(loads):
            raise ActionError(f"{col} is used beyond the addresses")
        # The launch: grid (N,), N a plain expression; the host spells triton.
        launch = launches[0]
        if any(a.star for a in launch.call.args):
            raise ActionError("the launch unpacks arguments with * or **")
        grid = launch.call.func.slice[0].slice.value  # type: ignore[union-attr]
        if not isinstance(grid, cst.Tuple) or len(grid.elements) != 1 or isinstance(grid.elements[0], cst.StarredElement):
            raise ActionError("the launch grid is not a literal `(N,)`")
        n_expr = grid.elements[0].value
        if not _plain(n_expr):
            raise ActionError("the grid's size is not a plain expression (names, shapes, sizes)")
        triton = next((k for k, v in analysis.names.prefix.items() if v == "triton"), None)
        if not analysis.imports_triton or triton is None:
            raise ActionError("the host does not import triton")
        launch_line = c.launch_statement(launch)
        if launch_line is None:
            raise ActionError("the launch is not a top-level statement of its host function")
        if COLS_PARAM in params or COLS_PARAM in c.names_in(launch.host):
            raise ActionError(f"{COLS_PARAM} is already a name here")
        taken = c.names_in(kdef) | params
        names = {"cols": c.first_free(taken, "cols", f"{col}_offsets", "col_offsets"),
                 "col_mask": c.first_free(taken, "col_mask", f"{col}_mask"),
                 "n_cols": c.first_free(taken, "n_cols", "num_cols", "n_columns")}
        names["slab"] = c.first_free(taken, "row_start", "slab_start", "first_row")
        plan = _Plan(kdef, launch, launch_line, tl, triton, col, col_assign, pid[1], acc_init, loads, rows,
                     store, row_blocks.pop(), c.code(n_expr), names, loop, None)
        try:
            plan.n_rows, plan.out_alloc = self._slab_facts(plan, kernel, acc)
        except ActionError as why:
            plan.split = str(why)
        return plan

    @staticmethod
    def _slab_facts(plan: _Plan, kernel: Kernel, acc: str) -> tuple[str, cst.Call]:
        """What the row-slab variant needs: the launch's row count and the output's allocation."""
        positional = [a for a in plan.loop.iter.args if a.keyword is None]
        if len(positional) != 3 or c.code(positional[0].value) != "0" or c.code(positional[2].value) != plan.row_block \
                or not isinstance(positional[1].value, cst.Name):
            raise ActionError(f"the row loop is not `range(0, n_rows, {plan.row_block})` over a kernel argument")
        bound = positional[1].value.value
        call = plan.launch.call
        n_rows = next((a.value for a in call.args if c.arg_param(a, call, kernel) == bound), None)
        if n_rows is None or not _plain(n_rows):
            raise ActionError(f"the launch's {bound} is not a plain expression")
        if len(plan.store.args) != 2 or not _linear_in(plan.store.args[1].value, acc):
            raise ActionError("the stored value is not the sum times constants: partial sums would not add up")
        params = {p.name for p in kernel.params}
        pointers = [t for t in _add_terms(plan.store.args[0].value) if isinstance(t, cst.Name) and t.value in params
                    and t.value != plan.col]
        out_arg = next((a.value for a in call.args if len(pointers) == 1 and c.arg_param(a, call, kernel) == pointers[0].value), None)
        if not isinstance(out_arg, cst.Name):
            raise ActionError("the output the kernel stores is not a named host tensor")
        statements = list(plan.launch.host.body.body)
        at = statements.index(plan.launch_line)
        writes = [i for i, s in enumerate(statements) if out_arg.value in _assigned(s)]
        alloc = None
        if len(writes) == 1 and writes[0] < at:
            single = _single_assign(statements[writes[0]])
            if single is not None and isinstance(single[1], cst.Call) and c.code(single[1].func) in ("torch.empty", "torch.empty_like"):
                alloc = single[1]
        if alloc is None:
            raise ActionError(f"{out_arg.value} is not allocated once by torch.empty/empty_like before the launch")
        if any(out_arg.value in c.names_in(s) for s in statements[writes[0] + 1:at]):
            raise ActionError(f"{out_arg.value} is used between its allocation and the launch")
        dtype = next((c.code(a.value) for a in alloc.args if a.keyword is not None and a.keyword.value == "dtype"), "")
        if dtype in ("torch.float16", "torch.half", "torch.bfloat16"):
            raise ActionError("a half-precision output would add the partial sums in half precision")
        return c.code(n_rows), alloc

    @staticmethod
    def _is_update(statement: cst.CSTNode, acc: str, tl: str) -> bool:
        """``acc += tl.sum(x, axis=0)`` or ``acc = acc + tl.sum(x, axis=0)``."""
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
            return False
        s = statement.body[0]
        if isinstance(s, cst.AugAssign) and isinstance(s.operator, cst.AddAssign) and c.code(s.target) == acc:
            value = s.value
        elif _single_assign(statement) and _single_assign(statement)[0] == acc and isinstance(s.value, cst.BinaryOperation) \
                and isinstance(s.value.operator, cst.Add) and c.code(s.value.left) == acc:
            value = s.value.right
        else:
            return False
        return _tl_call(value, "sum") == tl and _zero_axis(value)

    @staticmethod
    def _update_value(statement: cst.SimpleStatementLine) -> cst.BaseExpression:
        s = statement.body[0]
        call = s.value if isinstance(s, cst.AugAssign) else s.value.right
        return call.args[0].value

    def _options(self, analysis: FileAnalysis, kernel: Kernel, plan: _Plan, target: GpuProfile) -> list[dict[str, Value]]:
        block = c.tile_plan(analysis, kernel).params.get(plan.row_block)
        tiles = TILES[80 if target.arch >= 80 else 70]
        slab = []
        if plan.split is None and target.arch >= 80:
            fixed = None if block is not None and block.tunable else \
                analysis.launches_of(kernel.name)[0].constexpr_values(kernel).get(plan.row_block)
            row_block = SLAB_TILE["row_block"] if fixed is None else fixed
            if c.is_pow2(row_block) and row_block * SLAB_TILE[COLS_PARAM] <= 8192:
                slab = [{COLS_PARAM: SLAB_TILE[COLS_PARAM], plan.row_block: row_block,
                         SLAB_PARAM: max(SLAB_TILE[SLAB_PARAM], row_block)}]
        if block is not None and block.tunable:
            return slab + [{COLS_PARAM: bc, plan.row_block: br} for bc, br in tiles]
        # The row block cannot change (or tiling does not know it): column blocks around its current value.
        value = analysis.launches_of(kernel.name)[0].constexpr_values(kernel).get(plan.row_block)
        if not c.is_pow2(value):
            return []
        limit = max(bc * br for bc, br in tiles)
        widths = sorted({bc for bc, _ in tiles if bc * value <= limit})
        return slab + [{COLS_PARAM: bc, plan.row_block: value} for bc in widths]

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            plan = self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError:
            return []
        return [Candidate(self.name, self.kind, kernel.name, params, _title(params, plan.row_block), c.kernel_line(kernel))
                for params in self._options(analysis, kernel, plan, target)]

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        module = c.parse(text)
        plan = self._plan(module, analysis, kernel)
        if params not in self._options(analysis, kernel, plan, target):
            raise ActionError(f"{c.fmt_params(params)} is not a column tile offered for {kernel.name} on {target.name}")
        tl, n = plan.tl, plan.names
        cols, col_mask = n["cols"], n["col_mask"]
        # Kernel: the column count before the constexprs, BLOCK_COLS last.
        kparams = list(plan.kdef.params.params)
        first_constexpr = next((p.index for p in kernel.params if p.kind == "constexpr"), len(kparams))
        kparams = _insert_param(kparams, first_constexpr, cst.Param(cst.Name(n["n_cols"])))
        slab = SLAB_PARAM in params
        for constexpr in (COLS_PARAM, SLAB_PARAM) if slab else (COLS_PARAM,):
            kparams = _insert_param(kparams, len(kparams), cst.Param(
                cst.Name(constexpr), annotation=cst.Annotation(c.expr(f"{tl}.constexpr"))))
        pid = c.code(plan.pid_call)
        first = plan.col_assign.with_changes(body=[c.stmt(f"{cols} = {pid} * {COLS_PARAM} + {tl}.arange(0, {COLS_PARAM})").body[0]])
        firsts = [first, c.stmt(f"{col_mask} = {cols} < {n['n_cols']}")]
        if slab:
            firsts.append(c.stmt(f"{n['slab']} = {tl}.program_id(1) * {SLAB_PARAM}"))
        pairs: list[tuple[cst.CSTNode, object]] = [
            (plan.kdef.params, plan.kdef.params.with_changes(params=kparams)),
            (plan.col_assign, cst.FlattenSentinel(firsts)),
            (plan.acc_init.body[0], plan.acc_init.body[0].with_changes(
                value=c.expr(f"{tl}.zeros([{COLS_PARAM}], dtype={tl}.float32)"))),
        ]
        to_2d = _Rename({r: f"{r}[:, None]" for r in plan.rows} | {plan.col: f"{cols}[None, :]"})
        for load in plan.loads:
            args = [a.with_changes(value=a.value.visit(to_2d)) if a.keyword is None or a.keyword.value == "mask" else a
                    for a in load.args]
            col_part = c.expr(f"{col_mask}[None, :]")
            mask = next((a for a in args if a.keyword is not None and a.keyword.value == "mask"), None)
            if mask is None:
                new = c.set_kwarg(load.with_changes(args=args), "mask", col_part)
            else:
                left = mask.value if isinstance(mask.value, (cst.Name, cst.Subscript)) or mask.value.lpar else \
                    mask.value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                new = c.set_kwarg(load.with_changes(args=args), "mask", cst.BinaryOperation(
                    left, cst.BitAnd(whitespace_before=cst.SimpleWhitespace(" "), whitespace_after=cst.SimpleWhitespace(" ")),
                    col_part))
            pairs.append((load, new))
        store_args = list(plan.store.args)
        store_args[0] = store_args[0].with_changes(value=store_args[0].value.visit(_Rename({plan.col: cols})))
        store = plan.store.with_changes(args=store_args)
        if slab:  # each program adds its slab's partial sums; the rows' loop stops at the slab's end
            store = store.with_changes(func=store.func.with_changes(attr=cst.Name("atomic_add")))
            loop_args = list(plan.loop.iter.args)
            bound = c.code(loop_args[1].value)
            loop_args[0] = loop_args[0].with_changes(value=cst.Name(n["slab"]))
            loop_args[1] = loop_args[1].with_changes(value=c.expr(f"{tl}.minimum({n['slab']} + {SLAB_PARAM}, {bound})"))
            pairs.append((plan.loop.iter, plan.loop.iter.with_changes(args=loop_args)))
            zeros = "torch.zeros_like" if c.code(plan.out_alloc.func) == "torch.empty_like" else "torch.zeros"
            pairs.append((plan.out_alloc, plan.out_alloc.with_changes(func=c.expr(zeros))))
        pairs.append((plan.store, c.set_kwarg(store, "mask", cst.Name(col_mask))))
        # Host: BLOCK_COLS constant, grid cdiv(N, BLOCK_COLS), N passed as the column count.
        call = plan.launch.call
        grid_tuple = call.func.slice[0].slice.value
        grid = [grid_tuple.elements[0].with_changes(value=c.expr(f"{plan.triton}.cdiv({plan.n_cols}, {COLS_PARAM})"))]
        if slab:
            grid = [grid[0].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                    cst.Element(c.expr(f"{plan.triton}.cdiv({plan.n_rows}, {SLAB_PARAM})"))]
        new_grid = grid_tuple.with_changes(elements=grid)
        new_call = call.with_changes(func=call.func.with_changes(
            slice=[call.func.slice[0].with_changes(slice=call.func.slice[0].slice.with_changes(value=new_grid))]))
        args = list(new_call.args)
        positional = [i for i, a in enumerate(args) if a.keyword is None and not a.star]
        if len(positional) >= first_constexpr:
            at = positional[first_constexpr - 1] + 1 if first_constexpr else 0
            args.insert(at, cst.Arg(c.expr(plan.n_cols), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
            if at == len(args) - 1 and at > 0:  # appended last: the previous arg needs a comma, the new one keeps its
                args[at] = args[at].with_changes(comma=args[at - 1].comma)
                args[at - 1] = args[at - 1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            new_call = new_call.with_changes(args=args)
        else:
            new_call = _kwarg_before_options(new_call, n["n_cols"], c.expr(plan.n_cols))
        new_call = _kwarg_before_options(new_call, COLS_PARAM, cst.Name(COLS_PARAM))
        constants = [c.stmt(f"{COLS_PARAM} = {params[COLS_PARAM]}")]
        if slab:
            new_call = _kwarg_before_options(new_call, SLAB_PARAM, cst.Name(SLAB_PARAM))
            constants.append(c.stmt(f"{SLAB_PARAM} = {params[SLAB_PARAM]}"))
        launch_line = c.replace_all(plan.launch_line, [(call, new_call)])
        pairs.append((plan.launch_line, cst.FlattenSentinel([
            constants[0].with_changes(leading_lines=plan.launch_line.leading_lines), *constants[1:],
            launch_line.with_changes(leading_lines=[]),
        ])))
        module = c.replace_all(module, pairs)
        # The row block, where the launch sets it (tiling's rules: host constant, literal or default).
        row_value = int(params[plan.row_block])
        rewritten = analyze(module.code)
        module = c.set_constexpr(module, rewritten, rewritten.kernel(kernel.name), {plan.row_block: row_value})
        notes = [f"{n['n_cols']} (the grid's {plan.n_cols}) is a new kernel argument that masks the last column block"]
        summary = f"column blocks of {params[COLS_PARAM]} in {kernel.name}: coalesced {row_value}x{params[COLS_PARAM]} tiles, " \
                  f"grid cdiv({plan.n_cols}, {COLS_PARAM})"
        if slab:
            summary += f" x cdiv({plan.n_rows}, {SLAB_PARAM}) row slabs"
            notes.append("the output is zeroed (torch.zeros) and each slab adds its partial sums with tl.atomic_add: "
                         "the order of those additions varies from run to run (equal up to rounding)")
        return c.finish(text, module, summary, notes)


def _strip_calls(node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` with every call replaced by 0 (to check what else an expression reads)."""

    class T(cst.CSTTransformer):
        def leave_Call(self, original_node, updated_node):
            return cst.Integer("0")

    return node.visit(T())


def _plain(node: cst.BaseExpression) -> bool:
    """Names, attributes, subscripts, numbers, arithmetic and shape reads (``x.size(1)``, ``len(x)``)."""
    ok = True

    class V(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            nonlocal ok
            if isinstance(n, cst.Call):
                f = n.func
                if not (isinstance(f, cst.Attribute) and f.attr.value in ("size", "numel", "stride", "dim")
                        or isinstance(f, cst.Name) and f.value in ("len", "int")):
                    ok = False
            elif isinstance(n, cst.BaseExpression) and not isinstance(
                    n, (cst.Name, cst.Attribute, cst.Subscript, cst.Integer, cst.BinaryOperation, cst.Call)):
                ok = False
            return ok

    node.visit(V())
    return ok


def _title(params: dict[str, Value], row_block: str) -> str:
    if SLAB_PARAM in params:
        return (f"Sum {params[COLS_PARAM]} adjacent columns over {params[SLAB_PARAM]}-row slabs per program, partial sums "
                f"added atomically ({c.fmt_params(params)})")
    return (f"Sum {params[COLS_PARAM]} adjacent columns per program in coalesced {params[row_block]}x{params[COLS_PARAM]} "
            f"tiles ({c.fmt_params(params)})")


def _linear_in(node: cst.BaseExpression, name: str) -> bool:
    """``name``, times or divided by expressions that do not read it (``acc``, ``acc / n``, ``-2.0 * acc``)."""
    if isinstance(node, cst.Name):
        return node.value == name
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _linear_in(node.expression, name)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply | cst.Divide):
        if name not in c.names_in(node.right):
            return _linear_in(node.left, name)
        return isinstance(node.operator, cst.Multiply) and name not in c.names_in(node.left) and _linear_in(node.right, name)
    return False


def _assigned(statement: cst.CSTNode) -> set[str]:
    """Names a host statement binds (assignment targets, loop targets, with-as names)."""
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_AssignTarget(self, n: cst.AssignTarget) -> None:
            found.update(c.names_in(n.target))

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            found.update(c.names_in(n.target))

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            found.update(c.names_in(n.target))

        def visit_For(self, n: cst.For) -> None:
            found.update(c.names_in(n.target))

    statement.visit(V())
    return found




def _insert_param(params: list[cst.Param], index: int, new: cst.Param) -> list[cst.Param]:
    """``params`` with ``new`` at ``index``, separated like its neighbours."""
    params = list(params)
    space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if index < len(params):
        params.insert(index, new.with_changes(comma=params[index - 1].comma if index else space))
    else:
        last = params[-1]
        between = params[-2].comma if len(params) > 1 and isinstance(params[-2].comma, cst.Comma) else space
        params[-1] = last.with_changes(comma=between)
        params.append(new.with_changes(comma=last.comma))
    return params


def _kwarg_before_options(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """Add ``name=value`` after the kernel's own arguments, before ``num_warps``/``num_stages``."""
    args = list(call.args)
    at = next((i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value.startswith("num_")), len(args))
    if at == len(args):
        return c.set_kwarg(call, name, value)
    eq = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    args.insert(at, cst.Arg(value=value, keyword=cst.Name(name), equal=eq,
                            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
    return call.with_changes(args=args)


ACTION = ColumnBlock()
