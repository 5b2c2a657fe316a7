"""Reordering: grouped ("swizzled") program order for a 2-D tiled grid, so neighbouring programs share L2.

The 2-D grid ``(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))`` becomes a 1-D grid of the same size; the
kernel maps its flat program id to ``(pid_m, pid_n)`` in groups of ``GROUP_M`` rows of tiles (the
mapping is a bijection, so every tile is still computed exactly once). Offered only when the grid
is exactly two ``cdiv(size, block)`` terms whose sizes and blocks the launch passes to the kernel,
and the kernel reads ``tl.program_id(0)`` and ``tl.program_id(1)`` once each and never
``tl.num_programs``.

Example: kernel=mm_kernel target=h100 params={"GROUP_M": 8}

```python before
@triton.jit
def mm_kernel(a_ptr, c_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.load(a_ptr + rm[:, None] * N + rn[None, :], mask=mask), mask=mask)


def copy(a, c, M, N):
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    mm_kernel[grid](a, c, M, N, BLOCK_M=32, BLOCK_N=32)
```

```python after
@triton.jit
def mm_kernel(a_ptr, c_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.load(a_ptr + rm[:, None] * N + rn[None, :], mask=mask), mask=mask)


def copy(a, c, M, N):
    grid = (triton.cdiv(M, 32) * triton.cdiv(N, 32),)
    mm_kernel[grid](a, c, M, N, BLOCK_M=32, BLOCK_N=32, GROUP_M=8)
```
"""

from __future__ import annotations

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit

GROUP_SIZES = (8, 4)
GROUP_PARAM = "GROUP_M"
_NEW_NAMES = ("pid", "num_pid_m", "num_pid_n", "num_pid_in_group", "first_pid_m", "group_size_m")


def _pid_statement(statement: cst.CSTNode, roots: frozenset[str]) -> tuple[str, int] | None:
    """``name = tl.program_id(axis)`` (triton.language spelled as in ``roots``) -> (name, axis)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    assign = statement.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    call = assign.value
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "program_id"
            and c.code(call.func.value) in roots):
        return None
    if len(call.args) != 1 or not isinstance(call.args[0].value, cst.Integer):
        return None
    return assign.targets[0].target.value, int(call.args[0].value.value)


def _cdiv_terms(grid: cst.BaseExpression) -> tuple[list[tuple[cst.BaseExpression, cst.BaseExpression]], bool] | None:
    """``(cdiv(a, b), cdiv(c, d))`` (optionally inside ``lambda META:``) -> ([(a, b), (c, d)], is_lambda)."""
    is_lambda = isinstance(grid, cst.Lambda)
    body = grid.body if is_lambda else grid
    if not isinstance(body, cst.Tuple) or len(body.elements) != 2:
        return None
    terms = []
    for element in body.elements:
        call = element.value
        if not (isinstance(call, cst.Call) and c.code(call.func) in ("triton.cdiv", "cdiv") and len(call.args) == 2):
            return None
        terms.append((call.args[0].value, call.args[1].value))
    return terms, is_lambda


class Reordering:
    name = "reordering"
    kind = "Reordering"
    changes_numerics = False
    # The tiles a persistent grid keeps in flight at once (one per SM) share rows of A and columns of B only in
    # grouped order: on the H200's square matmul, grouped order alone measured 1.00x, while persistent TMA tiles ran
    # 1.444 ms over grouped order (persistent_ablation/) and 1.516 ms without it (bench_session14/), in two runs.
    pays_with = frozenset({"persistent"})

    def _plan(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel):
        if kernel.param(GROUP_PARAM) is not None:
            raise ActionError(f"{kernel.name} already has {GROUP_PARAM}")
        if kernel.calls_of("num_programs"):
            raise ActionError("the kernel reads tl.num_programs, which a 1-D grid changes")
        pids = kernel.calls_of("program_id")
        if len(pids) != 2:
            raise ActionError("the kernel does not read exactly two program ids")
        kdef, launches = c.locate(module, kernel.name)
        if len(launches) != 1:
            raise ActionError("grouped order needs exactly one launch of the kernel in this file")
        launch = launches[0]
        statements = {}
        roots = c.language_roots(analysis)
        for statement in kdef.body.body:
            hit = _pid_statement(statement, roots)
            if hit:
                statements[hit[1]] = (statement, hit[0])
        if set(statements) != {0, 1}:
            raise ActionError("the program ids are not read as `name = tl.program_id(0|1)` at the top of the kernel")
        used = c.names_in(kdef)
        clash = [n for n in _NEW_NAMES if n in used and n not in (statements[0][1], statements[1][1])]
        if clash:
            raise ActionError(f"the kernel already uses {', '.join(clash)}")
        grid = c.grid_expression(launch)
        parsed = _cdiv_terms(grid)
        if parsed is None:
            raise ActionError("the grid is not (cdiv(size_m, block_m), cdiv(size_n, block_n))")
        terms, is_lambda = parsed
        by_source = {a.source.strip(): a.param for a in analysis.launches_of(kernel.name)[0].args if a.param}
        mapped = []
        for size, block in terms:
            size_param = by_source.get(c.code(size).strip())
            if isinstance(block, cst.Subscript) and is_lambda:  # META["BLOCK_M"]
                block_param = next(iter(c.names_in(block.slice[0]) & set(kernel.constexpr_names)), None)
            else:
                block_param = None if isinstance(block, cst.Integer) else by_source.get(c.code(block).strip())
                if isinstance(block, cst.Integer):  # literal: match a literal kwarg
                    same = [a.param for a in analysis.launches_of(kernel.name)[0].args
                            if a.keyword and a.source.strip() == block.value and a.param in kernel.constexpr_names]
                    if len(same) > 1:  # equal literals: the block whose name says this axis
                        same = [p for p in same if c.block_role(p) == "mn"[len(mapped)]]
                    block_param = same[0] if len(same) == 1 else None
            if size_param is None or block_param is None or kernel.param(size_param) is None:
                raise ActionError(f"cannot match grid term cdiv({c.code(size)}, {c.code(block)}) to kernel arguments")
            mapped.append((size_param, block_param))
        grid_node = grid
        var = launch.call.func.slice[0].slice.value  # type: ignore[union-attr]
        if isinstance(var, cst.Name) and launch.host is not None:
            uses = c.count_name(launch.host, var.value)
            if uses != 2:  # the assignment and this launch
                raise ActionError(f"the grid variable {var.value} is used elsewhere too")
        return kdef, launch, statements, mapped, grid_node, is_lambda

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError:
            return []
        line = kernel.calls_of("program_id")[0].span.start.line
        return [Candidate(self.name, self.kind, kernel.name, {GROUP_PARAM: g},
                          f"Reorder programs in groups of {GROUP_PARAM}={g} for L2 reuse on {target.key.upper()}", line)
                for g in GROUP_SIZES]

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        try:
            self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError as exc:
            return str(exc) or "not a 2-D tile grid"
        return None

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        group = params.get(GROUP_PARAM)
        if not c.is_pow2(group) or group > 64:
            raise ActionError(f"{GROUP_PARAM} must be a power of two up to 64, not {group!r}")
        module = c.parse(text)
        kdef, launch, statements, mapped, grid, is_lambda = self._plan(module, analysis, kernel)
        (m_size, m_block), (n_size, n_block) = mapped
        pid_m, pid_n = statements[0][1], statements[1][1]
        pid = "pid" if "pid" not in (pid_m, pid_n) else "pid_flat"
        # Written with the file's own name for triton.language, the one the program-id read used.
        tl = c.code(statements[0][0].body[0].value.func.value)
        block = [
            f"{pid} = {tl}.program_id(0)",
            f"num_pid_m = {tl}.cdiv({m_size}, {m_block})",
            f"num_pid_n = {tl}.cdiv({n_size}, {n_block})",
            f"num_pid_in_group = {GROUP_PARAM} * num_pid_n",
            f"first_pid_m = ({pid} // num_pid_in_group) * {GROUP_PARAM}",
            f"group_size_m = {tl}.minimum(num_pid_m - first_pid_m, {GROUP_PARAM})",
            f"{pid_m} = first_pid_m + ({pid} % num_pid_in_group) % group_size_m",
            f"{pid_n} = ({pid} % num_pid_in_group) // group_size_m",
        ]
        first = statements[0][0]
        new_statements = [c.stmt(s) for s in block]
        new_statements[0] = new_statements[0].with_changes(leading_lines=first.leading_lines)
        # The kernel: the two program-id reads become the grouped mapping, plus the new constexpr.
        body = []
        for statement in kdef.body.body:
            if statement is first:
                body.extend(new_statements)
            elif statement is statements[1][0]:
                continue
            else:
                body.append(statement)
        params_list = list(kdef.params.params)
        last = params_list[-1]
        new_param = cst.Param(cst.Name(GROUP_PARAM), annotation=cst.Annotation(c.expr(f"{tl}.constexpr")))
        new_param = new_param.with_changes(comma=last.comma)
        params_list[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        params_list.append(new_param)
        new_kdef = kdef.with_changes(body=kdef.body.with_changes(body=body),
                                     params=kdef.params.with_changes(params=params_list))
        # The grid: two terms become their product, one dimension.
        body_expr = grid.body if is_lambda else grid
        e0, e1 = (c.code(e.value) for e in body_expr.elements)  # type: ignore[union-attr]
        flat = c.expr(f"({e0} * {e1},)")
        new_grid = grid.with_changes(body=flat) if is_lambda else flat
        new_call = c.set_kwarg(launch.call, GROUP_PARAM, cst.Integer(str(group)))
        pairs = [(kdef, new_kdef), (grid, new_grid)]
        if grid is launch.call.func.slice[0].slice.value:  # type: ignore[union-attr]
            new_call = new_call.with_changes(func=new_call.func.with_changes(
                slice=[new_call.func.slice[0].with_changes(slice=cst.Index(new_grid))]))
            pairs = [(kdef, new_kdef)]
        pairs.append((launch.call, new_call))
        module = c.replace_all(module, pairs)
        return c.finish(text, module, f"grouped program order for {kernel.name} ({GROUP_PARAM}={group})")


ACTION = Reordering()
