"""Row grid: a flat index split into row and column by ``// W`` and ``% W`` becomes a 2-D grid of rows and column blocks.

Elementwise kernels written over a flat index (``offs = pid * BLOCK + tl.arange(0, BLOCK)``, common in
KernelBench-style and generated code) recover the row and column with an integer division and remainder by
a run-time width on every element: ``row = offs // W``, ``col = offs % W``, a channel ``(offs // HW) % C``, a
per-row scale ``scale_ptr + offs // K``. On a grid of ``(rows, column blocks)`` the row is the first program id,
one scalar per program, and the column a contiguous block: no division per element, per-row values become
scalar loads, and the column loads are contiguous vectors. ``offs`` stays ``row * W + col`` for the accesses
that used it; the masks also test ``col < W`` (a column block can pass the row's end). Offered when the kernel
is 1-D and elementwise (no reduction, scan, atomic, dot or loop), reads its program id only in ``offs``, every
``//`` and ``%`` of ``offs`` is by the same width parameter, every load and store is masked, and its one launch's
grid is ``(cdiv(X, BLOCK),)`` where ``X`` is the element count the kernel masks against (``offs < n``), the same
expression once the host's names are read through. The new grid is ``(cdiv(X, W), cdiv(W, BLOCK))``.

Example: kernel=geglu_kernel target=h100 params={}

```python before
@triton.jit
def geglu_kernel(x_ptr, out_ptr, n, half, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    row = offs // half
    col = offs % half
    a = tl.load(x_ptr + row * 2 * half + col, mask=mask)
    b = tl.load(x_ptr + row * 2 * half + half + col, mask=mask)
    tl.store(out_ptr + offs, a * tl.sigmoid(a) * b, mask=mask)


def geglu(x):
    rows, width = x.shape
    out = torch.empty((rows, width // 2), device=x.device, dtype=x.dtype)
    n = out.numel()
    geglu_kernel[(triton.cdiv(n, 256),)](x, out, n, width // 2, BLOCK=256)
    return out
```

```python after
@triton.jit
def geglu_kernel(x_ptr, out_ptr, n, half, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    offs = row * half + col
    mask = (offs < n) & (col < half)
    a = tl.load(x_ptr + row * 2 * half + col, mask=mask)
    b = tl.load(x_ptr + row * 2 * half + half + col, mask=mask)
    tl.store(out_ptr + offs, a * tl.sigmoid(a) * b, mask=mask)


def geglu(x):
    rows, width = x.shape
    out = torch.empty((rows, width // 2), device=x.device, dtype=x.dtype)
    n = out.numel()
    geglu_kernel[(triton.cdiv(n, width // 2), triton.cdiv(width // 2, 256))](x, out, n, width // 2, BLOCK=256)
    return out
```
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit
from .fusion import _assign_of

# Calls that mix elements or programs: a value computed on a masked-off lane could reach another lane.
_NOT_ELEMENTWISE = frozenset({
    "sum", "max", "min", "argmax", "argmin", "reduce", "cumsum", "cumprod", "associative_scan", "xor_sum",
    "dot", "dot_scaled", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and",
    "atomic_or", "atomic_xor", "num_programs", "make_block_ptr", "make_tensor_descriptor", "advance", "histogram",
    "sort", "gather", "flip", "trans", "reshape", "view", "join", "split", "permute", "broadcast_to", "debug_barrier",
})


@dataclass
class _Plan:
    kdef: cst.FunctionDef
    offs_line: cst.SimpleStatementLine  # ``offs = pid * BLOCK + tl.arange(0, BLOCK)``
    pid_line: cst.SimpleStatementLine | None  # ``pid = tl.program_id(0)``, dropped
    offs: str
    width: str  # the kernel parameter the flat index is split by
    block: str
    row: str
    col: str
    row_line: cst.SimpleStatementLine | None  # ``row = offs // W``: becomes the program id
    col_line: cst.SimpleStatementLine | None  # ``col = offs % W``: becomes the column block
    language: str
    grid: cst.Tuple  # ``(cdiv(X, BLOCK),)``, at the launch or in the one ``grid = ...`` it reads
    width_host: str  # what the launch passes for the width, as written
    triton: str  # how the grid spells triton (``triton`` in ``triton.cdiv``)
    masks: list[cst.SimpleStatementLine]  # ``mask = offs < n`` lines the accesses name: they get ``& (col < W)``
    scalar_loads: set[int]  # ids of loads whose address reads only the row: one value per program, unmasked


def _split_of(node: cst.CSTNode, offs: str, op: type) -> str | None:
    """``offs // W`` (``op`` FloorDivide) or ``offs % W`` (Modulo) -> W; None otherwise."""
    node = c.unparen(node) if isinstance(node, cst.BaseExpression) else node
    if (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, op) and isinstance(c.unparen(node.left), cst.Name)
            and c.unparen(node.left).value == offs and isinstance(c.unparen(node.right), cst.Name)):
        return c.unparen(node.right).value
    return None


class _Splits(cst.CSTVisitor):
    """The widths of every ``offs // W`` and ``offs % W``, and how many times ``offs`` is divided by anything else."""

    def __init__(self, offs: str):
        self.offs = offs
        self.widths: set[str] = set()
        self.other_ops: int = 0  # ``offs // 2 * W`` and the like: refused

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> bool:
        for op in (cst.FloorDivide, cst.Modulo):
            if isinstance(node.operator, op) and isinstance(c.unparen(node.left), cst.Name) and c.unparen(node.left).value == self.offs:
                width = _split_of(node, self.offs, op)
                if width is None:
                    self.other_ops += 1
                else:
                    self.widths.add(width)
        return True


class RowGrid(c.ExplainsByPlan):
    name = "row_grid"
    kind = "Tiling"  # it changes how the work is cut into programs: a 2-D grid of rows and column blocks
    changes_numerics = False  # the same elements, each computed from the same values
    keeps_interface = False  # the launch's grid changes

    def _plan(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel) -> _Plan:
        roots = c.language_roots(analysis)
        if not roots:
            raise ActionError("the file does not import triton.language")
        kdef, launches = c.locate(module, kernel.name)
        if len(launches) != 1:
            raise ActionError("needs exactly one launch of the kernel in this file")
        if kernel.is_autotuned or kernel.heuristics:
            raise ActionError("an autotuned or heuristics-set kernel: its grid follows configs this step does not see")
        calls = c.calls_in(kdef)
        mixing = sorted({call.func.attr.value for call in calls if isinstance(call.func, cst.Attribute)
                         and c.code(call.func.value) in roots and call.func.attr.value in _NOT_ELEMENTWISE})
        if mixing:
            raise ActionError(f"not an elementwise kernel: it calls {', '.join(mixing)}")
        if c.contains(kdef.body, cst.For) or c.contains(kdef.body, cst.While) or c.contains(kdef.body, cst.Return):
            raise ActionError("the kernel loops or returns early: not one flat block per program")
        body = [s for s in kdef.body.body if not c.is_docstring(s)]
        program_ids = [call for call in calls if c.is_call(call, "program_id", roots)]
        if len(program_ids) != 1 or c.flat(program_ids[0]) not in {f"{r}.program_id(0)" for r in roots} | {
                f"{r}.program_id(axis=0)" for r in roots}:
            raise ActionError("the kernel does not read exactly one program id, on axis 0")
        # ``offs = pid * BLOCK + tl.arange(0, BLOCK)`` (pid a name for program_id(0), or the call itself).
        pid_line, offs_line, offs, block = None, None, None, None
        for statement in body:
            single = _assign_of(statement)
            if single is None:
                continue
            name, value = single
            if c.flat(value) in {c.flat(program_ids[0])}:
                pid_line = statement
                continue
            parts = _flat_offsets(value, roots, _assign_of(pid_line)[0] if pid_line is not None else None, program_ids[0])
            if parts is not None:
                offs_line, offs, block = statement, name, parts
                break
        if offs_line is None:
            raise ActionError("no top-level `offs = pid * BLOCK + tl.arange(0, BLOCK)`")
        if kernel.param(block) is None or kernel.param(block).kind != "constexpr":
            raise ActionError(f"{block} is not a constexpr parameter")
        if pid_line is not None and c.count_name(kdef.body, _assign_of(pid_line)[0]) != 2:
            raise ActionError("the program id is read besides the flat offsets")
        if body.index(offs_line) > (body.index(pid_line) + 1 if pid_line is not None else 0):
            raise ActionError("statements run between the program id and the flat offsets")
        if c.count_name(kdef.body, offs) - 1 != _reads_after(body[body.index(offs_line) + 1:], offs):
            raise ActionError(f"{offs} is assigned again")
        splits = _Splits(offs)
        for statement in body[body.index(offs_line) + 1:]:
            statement.visit(splits)
        if splits.other_ops or len(splits.widths) != 1:
            raise ActionError(f"{offs} is not split into row and column by one width (`{offs} // W`, `{offs} % W`)"
                              if not splits.widths else f"{offs} is divided by more than one width or expression")
        (width,) = splits.widths
        param = kernel.param(width)
        if param is None or param.kind == "pointer":
            raise ActionError(f"{width} is not a size parameter of the kernel")
        if width in c.bound_names(body):
            raise ActionError(f"{width} is reassigned in the kernel")
        # Every access masked: a column block past the row's end must not touch the next row.
        for call in calls:
            if (c.is_call(call, "load", roots) or c.is_call(call, "store", roots)) and _mask_arg(call) is None:
                raise ActionError("an access is not masked")
        count = _count_bound(body, offs, kernel)
        if count is None:
            raise ActionError(f"no mask `{offs} < n` saying how many elements there are")
        # ``row = offs // W`` and ``col = offs % W`` lines become the ids; other splits read them.
        taken = c.names_in(kdef) | {p.name for p in kernel.params}
        row_line = next((s for s in body if (a := _assign_of(s)) and _split_of(a[1], offs, cst.FloorDivide) == width), None)
        col_line = next((s for s in body if (a := _assign_of(s)) and _split_of(a[1], offs, cst.Modulo) == width), None)
        row = _assign_of(row_line)[0] if row_line is not None else c.first_free(taken, "row", "row_id", "flat_row")
        col = _assign_of(col_line)[0] if col_line is not None else c.first_free(taken, "col", "col_id", "flat_col")
        for line, name in ((row_line, row), (col_line, col)):
            if line is not None and c.count_name(kdef.body, name) - 1 != _reads_after(body[body.index(line) + 1:], name):
                raise ActionError(f"{name} is assigned more than once")
        if row_line is not None and body.index(row_line) < body.index(offs_line) or \
                col_line is not None and body.index(col_line) < body.index(offs_line):
            raise ActionError("the row or column is computed before the flat offsets")
        # The launch: ``(cdiv(X, BLOCK),)`` with X the masked count read in the host's names.
        launch = launches[0]
        grid = c.grid_expression(launch)
        written = launch.call.func.slice[0].slice.value
        if isinstance(written, cst.Name) and (launch.host is None or c.count_name(launch.host, written.value) != 2):
            raise ActionError(f"the grid {written.value} is read elsewhere too")
        if not (isinstance(grid, cst.Tuple) and len(grid.elements) == 1):
            raise ActionError("the grid is not a one-axis tuple")
        cdiv = c.unparen(grid.elements[0].value)
        if not (isinstance(cdiv, cst.Call) and isinstance(cdiv.func, cst.Attribute) and cdiv.func.attr.value == "cdiv"
                and len(cdiv.args) == 2):
            raise ActionError("the grid is not `(triton.cdiv(n, BLOCK),)`")
        sources = c.launch_sources(launch, kernel)
        width_arg = next((a for a in launch.call.args if c.arg_param(a, launch.call, kernel) == width), None)
        if width_arg is None or any(name not in sources for name in c.names_in(c.expr(count)) if kernel.param(name)):
            raise ActionError("the launch does not pass the width and the count")
        count_host = c.code(c.substitute_names(c.expr(count), {n: c.expr(f"({sources[n]})") for n in c.names_in(c.expr(count))
                                                             if kernel.param(n)}))
        if not _same_count(launch, c.code(cdiv.args[0].value), count_host):
            raise ActionError(f"the grid's count `{c.code(cdiv.args[0].value)}` is not the kernel's `{count}` as launched")
        width_host = c.code(width_arg.value).strip()
        if not _pure(width_arg.value):
            raise ActionError(f"the width `{width_host}` is not plain host arithmetic to evaluate again")
        masks = []
        for call in calls:
            arg = _mask_arg(call) if (c.is_call(call, "load", roots) or c.is_call(call, "store", roots)) else None
            if arg is not None and isinstance(arg.value, cst.Name):
                line = next((s for s in body if (a := _assign_of(s)) and a[0] == arg.value.value), None)
                if line is None or c.count_name(kdef.body, arg.value.value) - 1 != _reads_after(body[body.index(line) + 1:], arg.value.value):
                    raise ActionError(f"the mask {arg.value.value} is not one top-level assignment")
                if body.index(line) < body.index(offs_line):
                    raise ActionError(f"the mask {arg.value.value} is computed before the flat offsets")
                if line not in masks:
                    masks.append(line)
        scalar_loads = set()
        as_ids = _AsIds(offs, width, row, col)
        vector = _vector_names(body, {offs, col}, roots, as_ids, row_line, col_line)
        for call in calls:
            if (c.is_call(call, "load", roots) or c.is_call(call, "store", roots)) and call.args:
                address = call.args[0].value.visit(as_ids)
                if c.names_in(address) & vector or c.contains(address, cst.Call, lambda n: c.is_call(n, "arange", roots)):
                    continue
                if c.is_call(call, "store", roots):
                    raise ActionError("a store's address would read only the row: every lane would write one place")
                mask = _mask_arg(call).value
                if isinstance(mask, cst.Name):
                    mask = next(_assign_of(s)[1] for s in body if (a := _assign_of(s)) and a[0] == mask.value)
                if c.flat(c.unparen(mask)) != c.flat(f"{offs}<{count}"):
                    # Only the count mask says every row of the grid read the address; a stricter one may not.
                    raise ActionError(f"a load of one value per row is masked by more than `{offs} < {count}`")
                # ``mean_ptr + c`` with ``c = (offs // HW) % C``: every element of a row read the same value, which
                # every row of the grid has (row * W < n), so it is read once, without the lane mask.
                scalar_loads.add(id(call))
        language = c.kernel_language(analysis, kernel) or min(roots)
        return _Plan(kdef, offs_line, pid_line, offs, width, block, row, col, row_line, col_line, language, grid, width_host, c.code(cdiv.func.value), masks, scalar_loads)

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            plan = self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError:
            return []
        return [Candidate(self.name, self.kind, kernel.name, {},
                          f"Rows on a grid axis: {plan.offs} // {plan.width} becomes the program id, "
                          f"columns in blocks of {plan.block} (no division per element)", c.kernel_line(kernel))]

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        if params:
            raise ActionError(f"{self.name} takes no parameters (got {c.fmt_params(params)})")
        module = c.parse(text)
        plan = self._plan(module, analysis, kernel)
        tl = plan.language
        ids = [c.stmt(f"{plan.row} = {tl}.program_id(0)\n"),
               c.stmt(f"{plan.col} = {tl}.program_id(1) * {plan.block} + {tl}.arange(0, {plan.block})\n"),
               c.stmt(f"{plan.offs} = {plan.row} * {plan.width} + {plan.col}\n")]
        ids[0] = ids[0].with_changes(leading_lines=(plan.pid_line or plan.offs_line).leading_lines)
        column_mask = c.expr(f"{plan.col} < {plan.width}")

        class Rewrite(_AsIds):
            def leave_Call(self, original_node, updated_node):
                if id(original_node) in plan.scalar_loads:
                    return updated_node.with_changes(args=[updated_node.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)])
                # An access masked inline gets the column test there; one naming a mask gets it in the mask's line.
                mask = _mask_arg(updated_node)
                if mask is None or isinstance(mask.value, cst.Name) or not (
                        c.code(updated_node.func).endswith(".load") or c.code(updated_node.func).endswith(".store")):
                    return updated_node
                both = cst.BinaryOperation(_wrapped(mask.value), cst.BitAnd(), _wrapped(column_mask))
                return updated_node.with_changes(args=[a.with_changes(value=both) if a is mask else a for a in updated_node.args])

        new_body: list[cst.BaseStatement] = []
        for statement in plan.kdef.body.body:
            if statement is plan.pid_line or statement is plan.row_line or statement is plan.col_line:
                continue
            if statement is plan.offs_line:
                new_body += ids
                continue
            if statement in plan.masks:
                assign = statement.body[0]
                statement = statement.with_changes(body=[assign.with_changes(
                    value=cst.BinaryOperation(_wrapped(assign.value), cst.BitAnd(), _wrapped(column_mask)))])
            new_body.append(statement.visit(Rewrite(plan.offs, plan.width, plan.row, plan.col)))
        new_kdef = plan.kdef.with_changes(body=plan.kdef.body.with_changes(body=new_body))
        # ``(cdiv(X, BLOCK),)`` -> ``(cdiv(X, W), cdiv(W, BLOCK))``: X and BLOCK as the grid writes them.
        cdiv = c.unparen(plan.grid.elements[0].value)
        count = c.code(cdiv.args[0].value).strip()
        rows = c.expr(f"{plan.triton}.cdiv({count}, {plan.width_host})")
        cols = cdiv.with_changes(args=[cdiv.args[0].with_changes(value=c.expr(plan.width_host)), cdiv.args[1]])
        new_grid = plan.grid.with_changes(elements=[
            cst.Element(rows, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), cst.Element(cols)])
        module = c.replace_all(module, [(plan.kdef, new_kdef), (plan.grid, new_grid)])
        return c.finish(text, module, f"{kernel.name}: rows on grid axis 0, {plan.block}-wide column blocks on axis 1",
                        [f"grid (cdiv({count}, {plan.width_host}) rows, cdiv({plan.width_host}, {plan.block}) column "
                         f"blocks); the masks also test {plan.col} < {plan.width}"])


def _flat_offsets(value: cst.BaseExpression, roots: frozenset[str], pid: str | None, program_id: cst.Call) -> str | None:
    """``pid * BLOCK + tl.arange(0, BLOCK)`` (either order, the id named or called) -> BLOCK."""
    value = c.unparen(value)
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)):
        return None
    for scaled, arange in ((value.left, value.right), (value.right, value.left)):
        scaled, arange = c.unparen(scaled), c.unparen(arange)
        if not (isinstance(arange, cst.Call) and c.is_call(arange, "arange", roots) and len(arange.args) == 2
                and c.flat(arange.args[0].value) == "0" and isinstance(arange.args[1].value, cst.Name)):
            continue
        block = arange.args[1].value.value
        if not (isinstance(scaled, cst.BinaryOperation) and isinstance(scaled.operator, cst.Multiply)):
            continue
        factors = {c.flat(scaled.left), c.flat(scaled.right)}
        ids = {pid, c.flat(program_id)} - {None}
        if block in factors and factors - {block} <= ids and factors != {block}:
            return block
    return None


class _AsIds(cst.CSTTransformer):
    """``offs // W`` -> the row name, ``offs % W`` -> the column name."""

    def __init__(self, offs: str, width: str, row: str, col: str):
        self.offs, self.width, self.row, self.col = offs, width, row, col

    def leave_BinaryOperation(self, original_node, updated_node):
        if _split_of(original_node, self.offs, cst.FloorDivide) == self.width:
            return cst.Name(self.row)
        if _split_of(original_node, self.offs, cst.Modulo) == self.width:
            return cst.Name(self.col)
        return updated_node


def _vector_names(body: list[cst.BaseStatement], seeds: set[str], roots: frozenset[str], as_ids: _AsIds,
                  *dropped: cst.SimpleStatementLine | None) -> set[str]:
    """Names that hold a block (one value per lane) once the row is a program id: the seeds and whatever is
    assigned from them or from ``tl.arange`` (a load of a row-only address is one value)."""
    vector = set(seeds)
    for statement in body:
        single = _assign_of(statement)
        if single is None or statement in dropped:
            continue
        name, value = single[0], single[1].visit(as_ids)
        loads = [call for call in c.calls_in(value) if c.is_call(call, "load", roots)]
        outside = c.replace_all(value, [(call, cst.Name("_row_value")) for call in loads]) if loads else value
        reads = c.names_in(outside) | set().union(*[c.names_in(call.args[0].value) for call in loads if call.args] or [set()])
        if reads & vector or c.contains(value, cst.Call, lambda n: c.is_call(n, "arange", roots) or
                                       c.is_call(n, "zeros", roots) or c.is_call(n, "full", roots)):
            vector.add(name)
    return vector


def _reads_after(statements: list[cst.BaseStatement], name: str) -> int:
    return sum(c.count_name(s, name) for s in statements)


def _mask_arg(call: cst.Call) -> cst.Arg | None:
    """The ``mask`` argument of a load (second positional) or store (third positional), or by keyword."""
    found = c.kwarg(call, "mask")
    if found is not None:
        return found
    positional = [a for a in call.args if a.keyword is None]
    index = 1 if c.code(call.func).endswith(".load") else 2
    return positional[index] if len(positional) > index else None


def _count_bound(body: list[cst.BaseStatement], offs: str, kernel: Kernel) -> str | None:
    """The ``n`` of a mask ``offs < n`` written anywhere in the kernel (``mask = offs < n`` or inline), when every
    such bound is the same expression of parameters."""
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Comparison(self, node: cst.Comparison) -> None:
            if (isinstance(c.unparen(node.left), cst.Name) and c.unparen(node.left).value == offs and len(node.comparisons) == 1
                    and isinstance(node.comparisons[0].operator, cst.LessThan)):
                found.add(c.flat(node.comparisons[0].comparator))

    for statement in body:
        statement.visit(V())
    if len(found) != 1:
        return None
    (bound,) = found
    names = c.names_in(c.expr(bound))
    if not names or any(kernel.param(n) is None or kernel.param(n).kind == "pointer" for n in names):
        return None
    return bound


def _same_count(launch: c.LaunchNode, grid_count: str, kernel_count: str) -> bool:
    """Whether the grid's count and the kernel's masked count are one expression once host names that are
    assigned once are read through (``n = rows * half`` and ``(rows) * (half)``)."""
    return _resolved(launch, grid_count) == _resolved(launch, kernel_count)


def _resolved(launch: c.LaunchNode, source: str, depth: int = 3) -> str:
    node = c.expr(source)
    for _ in range(depth):
        mapping = {}
        for name in c.names_in(node):
            assign = c.host_assignment(launch.host, name) if launch.host is not None else None
            if assign is not None and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
                mapping[name] = c.expr(f"({c.code(assign.value)})")
        if not mapping:
            break
        node = c.substitute_names(node, mapping)
    try:
        import sympy

        return str(sympy.simplify(sympy.sympify(c.flat(node).replace(".", "__dot__").replace("()", "__call__"))))
    except Exception:  # noqa: BLE001 - not sympy's arithmetic: compare the spelling
        return c.flat(node).replace("(", "").replace(")", "")


def _pure(node: cst.BaseExpression) -> bool:
    """Names, attributes, numbers, arithmetic, subscripts and shape reads (``.numel()``, ``.size(1)``): safe to
    evaluate a second time at the launch."""
    for call in c.calls_in(node):
        if not (isinstance(call.func, cst.Attribute) and call.func.attr.value in ("numel", "size", "stride", "dim")):
            return False
    return True


def _wrapped(node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` in parentheses unless it is a name or already parenthesised."""
    if isinstance(node, cst.Name) or getattr(node, "lpar", None):
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


ACTION = RowGrid()
