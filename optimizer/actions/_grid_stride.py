"""Grid-stride ("persistent") row loops for rows_per_program: find one, prove its rows independent, rewrite its header.

A persistent row kernel walks its rows as ``for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0))``.
Its loop body is a one-row-per-program body with the loop variable as the row index, so rows_per_program
infers and rewrites that body with the machinery it already has: ``as_row_kernel`` gives the kernel
seen that way (the statements before the loop, ``row = tl.program_id(0)``, then the loop's body).
That view is faithful only when no value crosses from one row's iteration to the next, which
``carried_name`` checks, and when the program id and program count serve the loop header alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from . import _common as c
from .base import ActionError

_RANGES = ("range", "triton.language.range")


@dataclass
class GridStride:
    """A kernel's grid-stride loop over rows and what the rewrite needs of it."""

    loop: cst.For
    axis: int  # the grid axis the loop strides over
    row: str  # the loop variable: the row index
    start: cst.BaseExpression  # the header's start (``row_start`` or ``tl.program_id(0)``)
    stop: cst.BaseExpression  # the header's stop: the row count
    step: cst.BaseExpression  # the header's step (``row_step`` or ``tl.num_programs(0)``)
    bindings: list[cst.Assign]  # ``row_start = tl.program_id(0)``, ``row_step = tl.num_programs(0)`` (kept as they are)


def program_call(node: cst.CSTNode, prefix: dict[str, str]) -> tuple[str, int | None] | None:
    """``("program_id", 0)`` for ``tl.program_id(0)`` (also ``axis=0``; None for the axis when it is not a number)."""
    if not isinstance(node, cst.Call):
        return None
    name = c.canonical_name(node.func, prefix)
    if name not in ("triton.language.program_id", "triton.language.num_programs"):
        return None
    axis = node.args[0].value if len(node.args) == 1 else None
    return name.rsplit(".", 1)[1], int(axis.evaluated_value) if isinstance(axis, cst.Integer) else None


def _strip_cast(node: cst.BaseExpression) -> cst.BaseExpression:
    """``tl.program_id(0).to(tl.int64)`` -> ``tl.program_id(0)``."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in c.SHAPE_METHODS:
        node = node.func.value
    return node


def find(kdef: cst.FunctionDef, prefix: dict[str, str]) -> GridStride | None:
    """The kernel's grid-stride row loop; None when no top-level loop starts at a program id; raises when one is not provable."""
    body = list(kdef.body.body)
    # Top-level ``name = tl.program_id(a)`` / ``tl.num_programs(a)``, each a name bound once in the kernel.
    bound: dict[str, tuple[tuple[str, int | None], cst.Assign]] = {}
    for statement in body:
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                call = program_call(_strip_cast(small.value), prefix)
                if call is not None:
                    bound[small.targets[0].target.value] = (call, small)

    def resolve(node: cst.BaseExpression) -> tuple[tuple[str, int | None] | None, cst.Assign | None]:
        if isinstance(node, cst.Name) and node.value in bound:
            return bound[node.value]
        return program_call(_strip_cast(node), prefix), None

    loop, bounds = None, None
    for statement in body:
        if isinstance(statement, cst.For) and isinstance(statement.iter, cst.Call) and c.canonical_name(statement.iter.func, prefix) in _RANGES:
            bounds = _bounds(statement.iter, prefix)
            # ``range(pid)`` and ``range(pid, n)`` are not grid-stride loops (the regular rewrite explains them).
            if bounds is not None and (resolve(bounds[0])[0] or ("",))[0] == "program_id":
                loop = statement
                break
    if loop is None or bounds is None:
        return None
    header = f"for {c.code(loop.target)} in {c.code(loop.iter)}"
    args = list(loop.iter.args)
    if any(a.star for a in args) or any(a.keyword is not None and a.keyword.value in ("arg1", "arg2") for a in args):
        raise ActionError(f"the grid-stride loop `{header}` is not `range(start, n_rows, step)` with its bounds in order")
    if c.canonical_name(loop.iter.func, prefix) == "range" and any(a.keyword is not None for a in args):
        # Triton compiles Python's ``range`` from its positional arguments alone: ``step=`` is dropped (a step of 1),
        # while the interpreter raises TypeError. The kernel does not do what it says; no rewrite can keep that.
        raise ActionError(f"the grid-stride loop `{header}` passes a keyword to Python's range, which Triton's compiler "
                          "ignores (the loop steps by 1): `tl.range(start, n_rows, step)` takes it")
    start, stop, step = bounds
    (start_call, start_binding), (step_call, step_binding) = resolve(start), resolve(step)
    axis = start_call[1]
    if axis is None:
        raise ActionError(f"`{c.code(start)}` does not name its grid axis by a number")
    if step_call != ("num_programs", axis):
        raise ActionError(f"the grid-stride loop `{header}` steps by `{c.code(step)}`, not by tl.num_programs({axis}): "
                          "which rows a program takes depends on a grid the kernel cannot see")
    if loop is not body[-1]:
        raise ActionError("statements follow the grid-stride loop: work after it is per program, not per row")
    if loop.orelse is not None or not isinstance(loop.target, cst.Name):
        raise ActionError(f"the grid-stride loop `{header}` has an else branch or an unpacked target")
    row = loop.target.value
    if row in c.bound_names(list(loop.body.body)) or row in c.bound_names(body[:-1]):
        raise ActionError(f"the kernel binds the row index {row} besides the grid-stride loop")
    bindings = [b for b in (start_binding, step_binding) if b is not None]
    for binding in bindings:
        name = binding.targets[0].target.value
        if c.count_name(kdef, name) != 2 or sum(name in c.bound_names(s) for s in body) != 1:
            raise ActionError(f"{name} (`{c.code(binding.value)}`) is used outside the grid-stride loop's header: "
                              "the loop must be the kernel's only use of the row index")
    header_calls = [_strip_cast(n) for n in (start, step) if not isinstance(n, cst.Name)]
    for call in _program_calls(kdef, prefix, axis):
        if not any(call is _strip_cast(b.value) for b in bindings) and not any(call is h for h in header_calls):
            raise ActionError(f"uses `{c.code(call)}` outside the grid-stride loop's header: the loop must be the kernel's "
                              "only use of the row axis")
    moving = c.names_in(stop) & c.bound_names(list(loop.body.body))
    if moving:
        raise ActionError(f"the grid-stride loop's row count `{c.code(stop)}` reads {', '.join(sorted(moving))}, which its body rebinds")
    carried = carried_name(list(loop.body.body), c.bound_names(list(loop.body.body)), {row})
    if carried is not None:
        raise ActionError(f"{carried} is carried from one row to the next around the grid-stride loop: rows are not computed alone")
    return GridStride(loop, axis, row, start, stop, step, bindings)


def own_split(kdef: cst.FunctionDef, prefix: dict[str, str], axis: int) -> str | None:
    """The header of a top-level loop whose bounds read ``tl.num_programs(axis)``, directly or through names bound before it.

    Such a kernel shares its rows out among the programs itself (row blocks of ``num_progs * BLOCK_M``, flat blocks,
    contiguous chunks): no grid-stride loop over single rows that rows_per_program could widen. Only used to say so.
    """
    reaching: set[str] = set()

    def reads_count(node: cst.CSTNode) -> bool:
        hit = False

        class V(cst.CSTVisitor):
            def visit_Call(self, n: cst.Call) -> None:
                nonlocal hit
                call = program_call(n, prefix)
                hit = hit or (call is not None and call[0] == "num_programs" and call[1] in (axis, None))

        node.visit(V())
        return hit or bool(c.names_in(node) & reaching)

    for statement in kdef.body.body:
        if isinstance(statement, cst.For):
            if reads_count(statement.iter):
                return f"for {c.code(statement.target)} in {c.code(statement.iter)}"
            continue
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign | cst.AnnAssign) and small.value is not None and reads_count(small.value):
                targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                reaching |= set().union(*(c.names_in(t) for t in targets))
    return None


def _bounds(call: cst.Call, prefix: dict[str, str]) -> tuple[cst.BaseExpression, ...] | None:
    """``(start, stop, step)`` of ``range(start, stop, step)``; ``tl.range`` may name its step (``step=num_progs``)."""
    positional = [a.value for a in call.args if a.keyword is None]
    step = c.kwarg(call, "step")
    if len(positional) == 3 and step is None:
        return tuple(positional)
    if len(positional) == 2 and step is not None:
        return (*positional, step.value)
    return None




def _program_calls(kdef: cst.FunctionDef, prefix: dict[str, str], axis: int) -> list[cst.Call]:
    """Every ``tl.program_id(axis)`` and ``tl.num_programs(axis)`` call of the kernel (unnumbered axes too)."""
    found: list[cst.Call] = []

    class V(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            call = program_call(n, prefix)
            if call is not None and call[1] in (axis, None):
                found.append(n)

    kdef.body.visit(V())
    return found


def carried_name(statements: list[cst.BaseStatement], bound: set[str], defined: set[str]) -> str | None:
    """The first name of ``bound`` that ``statements`` may read before assigning it (a value from the previous trip).

    ``defined`` holds the names certainly assigned so far in this trip; a branch defines what both of its
    sides define, a nested loop nothing (it may run zero times), so reading a name set only inside a nested
    loop after that loop counts as carried too. Conservative: a refusal, never a wrong rewrite. Statements other
    than assignments, stores, branches and for loops raise (``while``, ``with``: no one-row reading).
    """
    defined = set(defined)

    def reads(node: cst.CSTNode) -> str | None:
        hit = sorted((c.names_in(node) & bound) - defined)
        return hit[0] if hit else None

    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    hit = reads(small.value)
                    targets = set().union(*(c.names_in(t.target) for t in small.targets))
                elif isinstance(small, cst.AugAssign):
                    hit = reads(small.value) or reads(small.target)
                    targets = c.names_in(small.target)
                elif isinstance(small, cst.AnnAssign):
                    hit = reads(small.value) if small.value is not None else None
                    targets = c.names_in(small.target)
                else:
                    hit, targets = reads(small), set()
                if hit is not None:
                    return hit
                defined |= targets
        elif isinstance(statement, cst.If):
            hit = reads(statement.test) or carried_name(list(statement.body.body), bound, defined)
            if hit is not None:
                return hit
            then = defined | _assigned_surely(list(statement.body.body))
            orelse = statement.orelse
            other: list[cst.BaseStatement] = [orelse] if isinstance(orelse, cst.If) else \
                list(orelse.body.body) if isinstance(orelse, cst.Else) else []
            hit = carried_name(other, bound, defined)
            if hit is not None:
                return hit
            defined = then & (defined | _assigned_surely(other))
        elif isinstance(statement, cst.For):
            hit = reads(statement.iter) or carried_name(list(statement.body.body), bound, defined | c.names_in(statement.target))
            if hit is not None:
                return hit
        else:
            raise ActionError(f"a `{type(statement).__name__.lower()}` statement in the grid-stride loop")
    return None


def _assigned_surely(statements: list[cst.BaseStatement]) -> set[str]:
    """Names that top-level assignments of ``statements`` bind (not those inside nested blocks)."""
    out: set[str] = set()
    for statement in statements:
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign):
                out |= set().union(*(c.names_in(t.target) for t in small.targets))
            elif isinstance(small, cst.AugAssign | cst.AnnAssign):
                out |= c.names_in(small.target)
    return out


def as_row_kernel(kdef: cst.FunctionDef, stride: GridStride, tl: str) -> cst.FunctionDef:
    """The kernel as one row per program: the statements before the loop (less the id bindings), ``row = tl.program_id(a)``, the loop's body.

    The loop body's statements are the original nodes, so kinds inferred on this view key the real ones.
    """
    before: list[cst.BaseStatement] = []
    for statement in kdef.body.body:
        if statement is stride.loop:
            break
        if isinstance(statement, cst.SimpleStatementLine):
            kept = [s for s in statement.body if not any(s is b for b in stride.bindings)]
            if not kept:
                continue
            if len(kept) != len(statement.body):
                statement = statement.with_changes(body=kept)
        before.append(statement)
    row_index = c.stmt(f"{stride.row} = {tl}.program_id({stride.axis})")
    return kdef.with_changes(body=kdef.body.with_changes(body=[*before, row_index, *stride.loop.body.body]))


def _times(node: cst.BaseExpression, block: str) -> cst.BaseExpression:
    """``node * BLOCK_M``, parenthesised where needed."""
    if not isinstance(node, cst.Name | cst.Call | cst.Attribute | cst.Subscript | cst.Integer) and not node.lpar:
        node = node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.BinaryOperation(node, cst.Multiply(whitespace_before=cst.SimpleWhitespace(" "),
                                                  whitespace_after=cst.SimpleWhitespace(" ")), cst.Name(block))


def rewritten_loop(stride: GridStride, body: list[cst.BaseStatement], names: dict[str, str], tl: str) -> cst.For:
    """``for row_block in tl.range(start * BLOCK_M, n_rows, step * BLOCK_M, ...)`` over the rewritten body, led by the row vector and mask."""
    block_m, block_var = names["BLOCK_M"], names["row_block"]
    args = list(stride.loop.iter.args)
    for i, a in enumerate(args):
        if a.value is stride.start or a.value is stride.step:
            args[i] = a.with_changes(value=_times(a.value, block_m))
    stop = c.code(stride.stop).strip()
    stop = stop if isinstance(stride.stop, cst.Name | cst.Integer | cst.Attribute) else f"({stop})"
    lead = [c.stmt(f"{stride.row} = {block_var} + {tl}.arange(0, {block_m})"),
            c.stmt(f"{names['row_mask']} = {stride.row} < {stop}")]
    return stride.loop.with_changes(target=cst.Name(block_var), iter=stride.loop.iter.with_changes(args=args),
                                    body=stride.loop.body.with_changes(body=[*lead, *body]))
