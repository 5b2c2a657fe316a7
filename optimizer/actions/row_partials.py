"""Row partials: a kernel that writes each row's share of a column sum writes one partial row per run of rows.

A first port of a norm backward (Triton's layer-norm tutorial before its lock groups, unsloth's RMSNorm backward)
runs one program per row and stores that row's weight-gradient terms (``dy * xhat``) into an fp32 ``[rows, N]``
workspace, which a column sum (``buf.sum(0)``, or a kernel summing it over its rows) reduces afterwards: a workspace
as large as the input, written and read back in full. Here each program walks ``ROWS_PER_PROGRAM`` consecutive rows
(``for row in range(...)``), adds the row's terms into a register accumulator, and stores it once, as row
``tl.program_id(0)`` of a workspace ``cdiv(rows, ROWS_PER_PROGRAM)`` rows tall: Liger-Kernel's form. The column sum
now adds fewer rows to the same totals (in another order: results match within fp32 rounding, not bit for bit).
Statements that do not depend on the row (column offsets, masks, loads of the weight) move before the loop, and
pointers moved per row (``X += row * stride``) become names of their own (``X_row = X + row * stride``).

Offered when the kernel's body is straight-line code (no loops or branches), reads its row as
``row = tl.program_id(0)`` (or ``.to(tl.int64)`` of it, which the run's first row keeps) once, is launched once with a one-axis grid ``(R,)``, stores nothing through a pointer it
also loads from, and has a workspace: a pointer parameter given a host tensor allocated as
``torch.empty((R, N), dtype=torch.float32, ...)`` (or ``zeros``) in the launching function, whose one
``tl.store`` has a row-independent mask and an address ``ptr + row * stride + <row-independent offsets>`` (the row
term written there or as ``ptr += row * stride``). After the launch the host only sums the workspace over its rows:
``buf.sum(0)`` / ``buf.sum(dim=0)`` / ``torch.sum(buf, dim=0)``, or a kernel launch that passes ``R`` for a count
the kernel uses only as a bound (``range`` arguments, comparisons, ``tl.cdiv``), loads the workspace only into
``acc += tl.load(...)`` sums and loads nothing else; that launch then passes the new row count.

Example: kernel=rms_bwd_kernel target=h100 params={"ROWS_PER_PROGRAM": 16}

```python before
@triton.jit
def rms_bwd_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_rows_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    dy = tl.load(dy_ptr + row * N + cols, mask=mask, other=0.0)
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    rstd = tl.load(rstd_ptr + row)
    xhat = x * rstd
    dx = rstd * (dy * w - xhat * tl.sum(dy * w * xhat, axis=0) / N)
    tl.store(dx_ptr + row * N + cols, dx, mask=mask)
    tl.store(dw_rows_ptr + row * N + cols, dy * xhat, mask=mask)


def rms_bwd(dy, x, w, rstd):
    M, N = x.shape
    dx = torch.empty_like(x)
    dw_rows = torch.empty((M, N), dtype=torch.float32, device=x.device)
    rms_bwd_kernel[(M,)](dy, x, w, rstd, dx, dw_rows, N, BLOCK=triton.next_power_of_2(N))
    return dx, dw_rows.sum(0)
```

```python after
@triton.jit
def rms_bwd_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_rows_ptr, N, BLOCK: tl.constexpr, n_rows, ROWS_PER_PROGRAM: tl.constexpr):
    row_start = tl.program_id(0) * ROWS_PER_PROGRAM
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    dw_rows_acc = tl.zeros((cols).shape, dtype=tl.float32)
    for row in range(row_start, tl.minimum(row_start + ROWS_PER_PROGRAM, n_rows)):
        dy = tl.load(dy_ptr + row * N + cols, mask=mask, other=0.0)
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0)
        rstd = tl.load(rstd_ptr + row)
        xhat = x * rstd
        dx = rstd * (dy * w - xhat * tl.sum(dy * w * xhat, axis=0) / N)
        tl.store(dx_ptr + row * N + cols, dx, mask=mask)
        dw_rows_acc += dy * xhat
    tl.store(dw_rows_ptr + tl.program_id(0) * N + cols, dw_rows_acc, mask=mask)


def rms_bwd(dy, x, w, rstd):
    M, N = x.shape
    dx = torch.empty_like(x)
    dw_rows = torch.empty((triton.cdiv(M, 16), N), dtype=torch.float32, device=x.device)
    rms_bwd_kernel[(triton.cdiv(M, 16),)](dy, x, w, rstd, dx, dw_rows, N, BLOCK=triton.next_power_of_2(N), n_rows=M, ROWS_PER_PROGRAM=16)
    return dx, dw_rows.sum(0)
```
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit

ROWS_PARAM = "ROWS_PER_PROGRAM"
COUNT_PARAM = "n_rows"
CHOICES = (16, 8, 32)  # rows a program sums: 16 keeps about eight programs an SM on a 16k-row input, 1/16 the workspace
_ALLOCATORS = ("torch.empty", "torch.zeros")
_SUMS = ("sum(0)", "sum(dim=0)", "sum(axis=0)")


@dataclass
class _Workspace:
    param: str  # the kernel's pointer parameter
    buffer: str  # the host tensor
    store: cst.Call  # its one tl.store in the kernel
    statement: cst.SimpleStatementLine  # the line holding the store
    bump: cst.SimpleStatementLine | None  # ``param += row * stride``, when the row term is written so
    mask: cst.Arg | None  # the store's mask, which the store after the loop keeps
    allocation: cst.Call  # torch.empty((R, N), ...)


@dataclass
class _Plan:
    kdef: cst.FunctionDef
    launch: c.LaunchNode
    row: str
    pid_line: cst.SimpleStatementLine
    grid_tuple: cst.Tuple
    count: str  # the grid's one axis R, as written
    roots: frozenset[str]  # how the file spells triton.language (``tl``)
    workspaces: list[_Workspace]
    moved: dict[str, cst.SimpleStatementLine] = field(default_factory=dict)  # pointer -> its ``+=`` line
    consumers: list[tuple[cst.Call, cst.Arg]] = field(default_factory=list)  # launches and the arg passing R


def _small(statement: cst.BaseStatement) -> cst.BaseSmallStatement | None:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        return statement.body[0]
    return None


def _row_id(value: cst.BaseExpression) -> cst.BaseExpression:
    """The ``tl.program_id(0)`` call of ``tl.program_id(0)`` or ``tl.program_id(0).to(tl.int64)``."""
    value = c.unparen(value)
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to":
        return c.unparen(value.func.value)
    return value


def _row_term(term: cst.BaseExpression, row: str, tainted: set[str]) -> bool:
    """``row * s``, ``s * row`` or ``row.to(tl.int64) * s`` with ``s`` row-independent."""
    term = c.unparen(term)
    if not (isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Multiply)):
        return False
    for mine, other in ((term.left, term.right), (term.right, term.left)):
        mine = c.unparen(mine)
        if isinstance(mine, cst.Call) and isinstance(mine.func, cst.Attribute) and mine.func.attr.value == "to":
            mine = c.unparen(mine.func.value)
        if isinstance(mine, cst.Name) and mine.value == row and not c.names_in(other) & tainted:
            return True
    return False


class RowPartials(c.ExplainsByPlan):
    name = "row_partials"
    kind = "Tiling"
    changes_numerics = False

    def _plan(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel) -> _Plan:
        kdef, launches = c.locate(module, kernel.name)
        sites = analysis.launches_of(kernel.name)
        if len(launches) != 1 or len(sites) != 1:
            raise ActionError("needs exactly one launch of the kernel in this file")
        launch = launches[0]
        if kernel.is_autotuned or kernel.heuristics:
            raise ActionError("the kernel is autotuned or has heuristics")
        if launch.host is None:
            raise ActionError("the kernel is launched at module level")
        body = [s for s in kdef.body.body if not c.is_docstring(s)]
        if any(not isinstance(s, cst.SimpleStatementLine) for s in body):
            raise ActionError("the kernel has a loop or a branch: only straight-line row kernels are rewritten")
        taken = c.names_in(kdef) | {p.name for p in kernel.params}
        for name in (ROWS_PARAM, COUNT_PARAM):
            if name in taken:
                raise ActionError(f"the kernel already uses the name {name}")
        program_ids = [call for call in c.calls_in(kdef) if c.code(call.func).endswith("program_id")]
        pid_lines = [s for s in body if isinstance(_small(s), cst.Assign) and len(_small(s).targets) == 1
                     and isinstance(_small(s).targets[0].target, cst.Name)
                     and any(_row_id(_small(s).value) is p for p in program_ids)]
        if len(program_ids) != 1 or len(pid_lines) != 1:
            raise ActionError("the row is not read once, as `row = tl.program_id(0)` (or its `.to(tl.int64)`)")
        call = program_ids[0]
        axis = [a for a in call.args if a.keyword is None or a.keyword.value == "axis"]
        if len(axis) != 1 or c.flat(axis[0].value) != "0":
            raise ActionError("the program id is not of axis 0")
        row = _small(pid_lines[0]).targets[0].target.value
        if c.assignment_counts(kdef).get(row) != 1:
            raise ActionError(f"{row} is assigned more than once")
        if any(c.code(x.func).split(".")[-1].startswith("atomic") or c.code(x.func).endswith("num_programs")
               for x in c.calls_in(kdef)):
            raise ActionError("the kernel uses atomics or tl.num_programs")
        grid = c.grid_expression(launch)
        if not isinstance(grid, cst.Tuple) or len(grid.elements) != 1:
            raise ActionError("the grid is not a tuple of one axis")
        if c.grid_name(launch) and c.grid_shared(launch, kernel.name):
            raise ActionError("the grid is shared with another launch")
        count = "".join(c.code(grid.elements[0].value).split())

        # What depends on the row, in order; pointers moved per row.
        params = {p.name: p for p in kernel.params}
        tainted = {row}
        moved: dict[str, cst.SimpleStatementLine] = {}
        for s in body:
            small = _small(s)
            if small is None:
                raise ActionError("a line holds several statements")
            bound = c.bound_names(s)
            for name in bound & set(params):
                if params[name].kind != "pointer" or not isinstance(small, cst.AugAssign) \
                        or not isinstance(small.operator, cst.AddAssign) or name in moved:
                    raise ActionError(f"the parameter {name} is reassigned other than moved once by `+=`")
                moved[name] = s
            if c.names_in(s) & tainted:
                tainted |= bound
        roots = c.language_roots(analysis)
        loaded = {n for x in c.calls_in(kdef) if c.is_call(x, "load", roots) for n in c.names_in(x.args[0].value)}
        stored = {n for x in c.calls_in(kdef) if c.is_call(x, "store", roots) for n in c.names_in(x.args[0].value)}
        both = sorted((loaded & stored) & {p for p in params if params[p].kind == "pointer"})
        if both:
            raise ActionError(f"the kernel loads from and stores through {both[0]} (in place)")

        sources = c.launch_sources(launch, kernel)
        workspaces = [w for p in kernel.params if p.kind == "pointer"
                      for w in [self._workspace(kdef, body, launch, p.name, sources.get(p.name, ""), count, row,
                                                tainted, moved, roots)] if w is not None]
        if not workspaces:
            raise ActionError(f"no fp32 [{count}, N] workspace that the kernel stores one row of per program")
        for w in workspaces:
            moved.pop(w.param, None)
        plan = _Plan(kdef, launch, row, pid_lines[0], grid, count, roots, workspaces, moved)
        self._check_host(analysis, module, plan)
        return plan

    @staticmethod
    def _workspace(kdef, body, launch, param, source, count, row, tainted, moved, roots) -> _Workspace | None:
        """The workspace behind ``param``, or None when it is not one (an ActionError when it nearly is)."""
        if not source.isidentifier():
            return None
        alloc = c.host_assignment(launch.host, source)
        value = getattr(alloc, "value", None)
        if not (isinstance(value, cst.Call) and c.code(value.func) in _ALLOCATORS and value.args
                and isinstance(shape := c.unparen(value.args[0].value), cst.Tuple | cst.List)
                and len(shape.elements) == 2 and "".join(c.code(shape.elements[0].value).split()) == count):
            return None
        dtype = c.kwarg(value, "dtype")
        if dtype is None or c.flat(dtype.value) not in ("torch.float32", "torch.float"):
            return None
        stores = [x for x in c.calls_in(kdef) if c.is_call(x, "store", roots) and param in c.names_in(x.args[0].value)]
        uses = c.count_name(kdef, param) - 1  # its parameter
        bump = moved.get(param)
        if len(stores) != 1 or uses != (2 if bump is not None else 1):
            raise ActionError(f"{param} (the workspace {source}) is used other than stored to once")
        store = stores[0]
        statement = next((s for s in body if isinstance(_small(s), cst.Expr) and _small(s).value is store), None)
        positional = [a for a in store.args if a.keyword is None]
        mask = c.kwarg(store, "mask") or (positional[2] if len(positional) > 2 else None)
        if statement is None or len(positional) < 2 or any(a.keyword is not None and a.keyword.value != "mask" for a in store.args):
            raise ActionError(f"{param}'s store is not a top-level tl.store(pointer, value, mask=...)")
        if mask is not None and c.names_in(mask.value) & tainted:
            raise ActionError(f"{param}'s store mask depends on the row")
        # The store moves after the loop: what its address and mask read must still hold the same values there.
        moved_reads = c.names_in(store.args[0].value) | (c.names_in(mask.value) if mask is not None else set())
        counts = c.assignment_counts(kdef)
        rebound = sorted(n for n in moved_reads - {param} if counts.get(n, 0) > 1)
        if rebound:
            raise ActionError(f"{rebound[0]}, which {param}'s store reads, is assigned more than once")
        row_terms = [t for t in c.summands(store.args[0].value) if c.names_in(t) & tainted and not (
            isinstance(t, cst.Name) and t.value == param)]
        if bump is not None:
            if row_terms or not _row_term(_small(bump).value, row, tainted):
                raise ActionError(f"{param} is not moved by `{param} += {row} * stride` alone")
        elif len(row_terms) != 1 or not _row_term(row_terms[0], row, tainted):
            raise ActionError(f"{param}'s store address is not `{param} + {row} * stride + <row-independent offsets>`")
        return _Workspace(param, source, store, statement, bump, mask, value)

    def _check_host(self, analysis: FileAnalysis, module: cst.Module, plan: _Plan) -> None:
        """After the launch the workspaces are only summed over their rows; a kernel doing it gets the new count."""
        host = plan.launch.host
        statements = list(host.body.body)
        at = next(i for i, s in enumerate(statements) if any(x is plan.launch.call for x in c.calls_in(s)))
        count_names = c.names_in(c.expr(plan.count))
        later_bound = c.bound_names(statements[at:])
        if count_names & later_bound:
            raise ActionError(f"`{plan.count}` is reassigned after the launch")
        buffers = {w.buffer for w in plan.workspaces}
        for w in plan.workspaces:
            before = sum(c.count_name(s, w.buffer) for s in statements[:at])
            if before != 1:
                raise ActionError(f"{w.buffer} is used before the launch")
        consumers: list[tuple[cst.Call, cst.Arg]] = []
        for s in statements[at + 1:]:
            for buffer in buffers:
                uses = c.count_name(s, buffer)
                if not uses:
                    continue
                flat = c.flat(s)
                summed = sum(flat.count(f"{buffer}.{form}") for form in _SUMS) + \
                    sum(flat.count(f"torch.sum({buffer},{axis})") for axis in ("0", "dim=0", "axis=0"))
                strides = flat.count(f"{buffer}.stride(")
                if summed + strides == uses:
                    continue
                launch = next((x for x in c.calls_in(s) if buffer in {c.code(a.value) for a in x.args}
                               and isinstance(x.func, cst.Subscript)), None)
                if launch is None:
                    raise ActionError(f"{buffer} is read after the launch other than summed over its rows")
                consumers.append(self._consumer(analysis, module, launch, buffers, plan.count))
        plan.consumers = list({id(call): (call, arg) for call, arg in consumers}.values())

    @staticmethod
    def _consumer(analysis: FileAnalysis, module: cst.Module, call: cst.Call, buffers: set[str],
                  count: str) -> tuple[cst.Call, cst.Arg]:
        """A kernel that sums the workspaces over their rows, and the argument passing it the row count."""
        name = c.code(call.func.value)
        consumer = analysis.kernel(name)
        if consumer is None:
            raise ActionError(f"the workspace is passed to {name}, not a kernel of this file")
        kdef, _ = c.locate(module, name)
        bound = {}
        for arg in call.args:
            if arg.star:
                raise ActionError(f"{name}'s launch unpacks arguments")
            param = c.arg_param(arg, call, consumer)
            if param is not None:
                bound[param] = (arg, "".join(c.code(arg.value).split()))
        counts = [p for p, (_a, src) in bound.items() if src == count]
        if len(counts) != 1:
            raise ActionError(f"{name} is not passed `{count}` once, as its row count")
        rows = counts[0]
        for node in _uses(kdef, rows):
            if node not in ("range", "compare", "cdiv"):
                raise ActionError(f"{name} uses {rows} other than as a bound (`{node}`)")
        workspace_params = {p for p, (_a, src) in bound.items() if src in buffers}
        roots = c.language_roots(analysis)
        for x in c.calls_in(kdef):
            if c.is_call(x, "load", roots):
                pointers = c.names_in(x.args[0].value) & {p.name for p in consumer.params if p.kind == "pointer"}
                if not pointers <= workspace_params:
                    raise ActionError(f"{name} loads {sorted(pointers - workspace_params)[0]}, not only the workspaces")
        for line in _all_small(kdef):
            loads = [x for x in c.calls_in(line) if c.is_call(x, "load", roots)]
            if not loads:
                continue
            value = c.unparen(line.value) if isinstance(line, cst.AugAssign) else None
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to":
                value = c.unparen(value.func.value)
            if not (isinstance(line, cst.AugAssign) and isinstance(line.operator, cst.AddAssign) and value is loads[0]
                    and len(loads) == 1):
                raise ActionError(f"{name} reads a workspace other than as `acc += tl.load(...)`")
        return call, bound[rows][0]

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            plan = self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError:
            return []
        spaces = ", ".join(w.buffer for w in plan.workspaces)
        return [Candidate(self.name, self.kind, kernel.name, {ROWS_PARAM: rows},
                          f"Sum {rows} rows per program into {spaces} ({ROWS_PARAM}={rows}): a workspace {rows}x smaller",
                          c.kernel_line(kernel)) for rows in CHOICES]

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        rows = params.get(ROWS_PARAM)
        if not isinstance(rows, int) or isinstance(rows, bool) or not 2 <= rows <= 1024:
            raise ActionError(f"{ROWS_PARAM} must be an integer from 2 to 1024, not {rows!r}")
        module = c.parse(text)
        plan = self._plan(module, analysis, kernel)
        tl = c.code(_row_id(_small(plan.pid_line).value).func.value)  # the kernel's name for triton.language
        body = [s for s in plan.kdef.body.body if not c.is_docstring(s)]
        docstring = [s for s in plan.kdef.body.body if c.is_docstring(s)]
        taken = c.names_in(plan.kdef)
        start = c.first_free(taken, "row_start", "first_row")
        tainted = {plan.row}
        before: list[cst.BaseStatement] = []
        loop: list[cst.BaseStatement] = []
        renames: dict[str, str] = {}
        workspace_lines = {id(w.statement): w for w in plan.workspaces}
        bumps = {id(w.bump) for w in plan.workspaces if w.bump is not None}
        accumulators: list[tuple[_Workspace, str]] = []
        in_loop: set[str] = set()  # every name a line kept in the loop reads or binds
        # A name bound more than once keeps every binding in the loop: hoisting the first would let a later row read
        # what the previous row's second binding left.
        multi = {n for n, count in c.assignment_counts(plan.kdef).items() if count > 1}
        for s in body:
            if s is plan.pid_line or id(s) in bumps:
                continue
            if id(s) in workspace_lines:
                w = workspace_lines[id(s)]
                acc = c.first_free(taken, f"{w.buffer}_acc", f"{w.param}_acc")
                taken.add(acc)
                accumulators.append((w, acc))
                value = c.substitute_names(w.store.args[1].value, renames)
                loop.append(c.stmt(f"{acc} += {c.code(value)}\n"))
                in_loop |= c.names_in(loop[-1])
                continue
            if any(s is line for line in plan.moved.values()) and c.names_in(s) & tainted:
                # ``X += row * stride`` would move X again on every trip: the row's pointer gets its own name.
                name = next(n for n, line in plan.moved.items() if line is s)
                fresh = c.first_free(taken, f"{name}_row", f"{name}_r")
                taken.add(fresh)
                loop.append(c.stmt(f"{fresh} = {name} + {c.code(c.substitute_names(_small(s).value, renames))}\n"))
                in_loop |= c.names_in(loop[-1])
                renames[name] = fresh
                tainted.add(fresh)
                continue
            s = c.substitute_names(s, renames)
            # A row-independent line moves before the loop unless it binds a name bound twice, or one the loop
            # already uses (moved first, the loop's earlier lines would read its new value).
            if c.names_in(s) & tainted or any(c.is_call(x, "store", plan.roots) for x in c.calls_in(s)) \
                    or c.bound_names(s) & (in_loop | multi):
                tainted |= c.bound_names(s)
                loop.append(s)
                in_loop |= c.names_in(s)
            else:
                before.append(s)
        ends = []
        for w, acc in accumulators:
            address = w.store.args[0].value
            offsets = [t for t in c.summands(address) if not (isinstance(t, cst.Name) and t.value == w.param)
                       and not c.names_in(t) & {plan.row}]
            shape = " + ".join(c.code(t) for t in offsets) or "0"
            before.append(c.stmt(f"{acc} = {tl}.zeros(({shape}).shape, dtype={tl}.float32)\n"))
            here = c.substitute_names(address, {plan.row: c.expr(f"{tl}.program_id(0)")})
            if w.bump is not None:
                step = c.substitute_names(_small(w.bump).value, {plan.row: c.expr(f"{tl}.program_id(0)")})
                here = c.expr(f"{c.code(here)} + {c.code(step)}")
            masked = f", mask={c.code(w.mask.value)}" if w.mask is not None else ""
            ends.append(c.stmt(f"{tl}.store({c.code(here)}, {acc}{masked})\n"))
        header = c.stmt(f"for {plan.row} in range({start}, {tl}.minimum({start} + {ROWS_PARAM}, {COUNT_PARAM})):\n    pass\n")
        header = header.with_changes(body=header.body.with_changes(body=loop))
        # ``tl.program_id(0).to(tl.int64)`` stays so: the rows' offsets keep the width the kernel chose for them.
        first = c.stmt(f"{start} = {c.code(_small(plan.pid_line).value)} * {ROWS_PARAM}\n")
        kdef = plan.kdef.with_changes(body=plan.kdef.body.with_changes(body=[*docstring, first, *before, header, *ends]))
        kdef = c.with_params_appended(kdef, [cst.Param(cst.Name(COUNT_PARAM)), cst.Param(
            cst.Name(ROWS_PARAM), annotation=cst.Annotation(c.expr(f"{tl}.constexpr")))])
        programs = c.expr(f"triton.cdiv({plan.count}, {rows})")
        new_tuple = plan.grid_tuple.with_changes(elements=[plan.grid_tuple.elements[0].with_changes(value=programs)])
        call = c.set_kwarg(c.set_kwarg(plan.launch.call, COUNT_PARAM, plan.grid_tuple.elements[0].value),
                           ROWS_PARAM, cst.Integer(str(rows)))
        out: list = [(plan.kdef, kdef)]
        if plan.launch.call.func.slice[0].slice.value is plan.grid_tuple:  # type: ignore[union-attr]
            call = call.with_changes(func=c.replace_all(cst.Module(body=[cst.SimpleStatementLine([cst.Expr(
                plan.launch.call.func)])]), [(plan.grid_tuple, new_tuple)]).body[0].body[0].value)
        else:
            out.append((plan.grid_tuple, new_tuple))
        out.append((plan.launch.call, call))
        for w in plan.workspaces:
            shape = c.unparen(w.allocation.args[0].value)
            out.append((shape.elements[0].value, programs))
        for _call, arg in plan.consumers:
            out.append((arg, arg.with_changes(value=programs)))
        module = c.replace_all(module, out)
        if c.module_import_name(module, "triton") is None:
            raise ActionError("the file does not import triton (the grid uses triton.cdiv)")
        spaces = ", ".join(w.buffer for w in plan.workspaces)
        notes = [f"each program sums {rows} rows into {spaces}, which now has {c.code(programs)} rows"]
        if plan.consumers:
            notes.append("the column sum after it is passed the new row count")
        return c.finish(text, module, f"row partials for {kernel.name} ({ROWS_PARAM}={rows})", notes)


def _all_small(kdef: cst.FunctionDef) -> list[cst.BaseSmallStatement]:
    found: list[cst.BaseSmallStatement] = []

    class V(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            found.extend(node.body)

    kdef.body.visit(V())
    return found


def _uses(kdef: cst.FunctionDef, name: str) -> list[str]:
    """How each use of ``name`` in the kernel reads it: ``range``, ``compare``, ``cdiv``, or the code around it."""
    kinds: list[str] = []

    class V(cst.CSTVisitor):
        def __init__(self) -> None:
            self.stack: list[cst.CSTNode] = []

        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, cst.Name) and node.value == name and self.stack:
                parent = self.stack[-1]
                grand = self.stack[-2] if len(self.stack) > 1 else None
                if isinstance(parent, cst.Arg) and isinstance(grand, cst.Call) and c.code(grand.func) in ("range", "tl.range"):
                    kinds.append("range")
                elif isinstance(parent, cst.Arg) and isinstance(grand, cst.Call) and c.code(grand.func).endswith("cdiv"):
                    kinds.append("cdiv")
                elif isinstance(parent, cst.ComparisonTarget | cst.Comparison):
                    kinds.append("compare")
                elif isinstance(parent, cst.Param):
                    pass
                else:
                    kinds.append(c.code(parent))
            self.stack.append(node)
            return True

        def on_leave(self, original_node: cst.CSTNode) -> None:
            self.stack.pop()

    kdef.visit(V())
    return kinds


ACTION = RowPartials()
