"""Batch launches: a host loop that launches a kernel once per slice becomes one launch with a grid axis per slice.

``for b in range(B): kernel[grid](x[b], out[b], ...)`` pays a launch and a tail per iteration and leaves the GPU
half idle while each small grid drains. The loop goes; the grid gains an axis of ``B`` programs
(``tl.program_id(axis)``, the next free axis); each pointer the loop sliced (``x[b]``, ``q[b, h]`` with ``h``
fixed, ``x[b, :, :]``) is passed whole and moved by ``pid * stride`` at the top of the kernel, the stride a new
parameter passed by keyword (``x.stride(0)``). Offered when the loop's body is the launch, after at most names
for its arguments (``xb = x[b]``, each read once, as an argument), over ``range(B)``; every argument that reads the loop variable is such a slice of a named tensor that the launch
passes no other way, its parameter a pointer; the grid is a tuple of fewer than three axes that does not read
the loop variable; the kernel is launched once in the file, reads no ``tl.num_programs`` and no program id of
the new axis; and no pointer the iterations share (not sliced) is written by the kernel, so the iterations are
independent and may run at once.

Example: kernel=softmax_kernel target=h100 params={"loop": "b"}

```python before
@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


def batched_softmax(x):
    B, S, N = x.shape
    y = torch.empty_like(x)
    for b in range(B):
        softmax_kernel[(S,)](x[b], y[b], N, BLOCK=triton.next_power_of_2(N))
    return y
```

```python after
@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr, x_ptr_stride_b, y_ptr_stride_b):
    pid_b = tl.program_id(1)
    x_ptr += pid_b.to(tl.int64) * x_ptr_stride_b
    y_ptr += pid_b.to(tl.int64) * y_ptr_stride_b
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


def batched_softmax(x):
    B, S, N = x.shape
    y = torch.empty_like(x)
    softmax_kernel[(S, B)](x, y, N, BLOCK=triton.next_power_of_2(N), x_ptr_stride_b=x.stride(0), y_ptr_stride_b=y.stride(0))
    return y
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
from .epilogue import _METADATA


@dataclass
class _Slice:
    arg: cst.Arg  # the launch argument ``x[b]``
    param: str  # the kernel parameter it binds
    whole: cst.BaseExpression  # what is passed instead: ``x`` (or ``q[b]`` for ``q[b, h]`` folding h)
    stride: str  # ``x.stride(0)``
    stride_param: str  # the new kernel parameter


@dataclass
class _Plan:
    kdef: cst.FunctionDef
    launch: c.LaunchNode
    loop: cst.For
    var: str
    count: cst.BaseExpression  # B of ``range(B)``
    grid_tuple: cst.Tuple  # the grid's tuple (in the launch, its lambda or its ``grid =``)
    slices: list[_Slice]
    pid: str
    call: cst.Call  # the launch with the loop body's names for its arguments written in place
    line: cst.SimpleStatementLine  # the launch's statement, the loop body's last


def _loop_of(host: cst.FunctionDef, statement: cst.SimpleStatementLine) -> cst.For | None:
    """The ``for`` loop (at any depth of the host) whose body ends with ``statement``, before it only ``name = value``
    lines (``xb = x[b]``: ``_aliases`` checks them)."""
    found: list[cst.For] = []

    class V(cst.CSTVisitor):
        def visit_For(self, node: cst.For) -> None:
            body = node.body.body if isinstance(node.body, cst.IndentedBlock) else []
            if body and body[-1] is statement:
                found.append(node)

    host.visit(V())
    return found[0] if len(found) == 1 else None


def _aliases(loop: cst.For, call: cst.Call, host: cst.FunctionDef) -> dict[str, cst.BaseExpression]:
    """``name -> value`` for the lines before the launch in the loop's body: each ``name = value`` once, the name read
    only as a whole argument of the launch (nowhere else in the host), the value free of names the body binds."""
    aliases: dict[str, cst.BaseExpression] = {}
    for statement in loop.body.body[:-1]:
        single = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
        if not (isinstance(single, cst.Assign) and len(single.targets) == 1 and isinstance(single.targets[0].target, cst.Name)):
            raise ActionError("the loop's body holds more than the launch and names for its arguments")
        name = single.targets[0].target.value
        if name in aliases or c.names_in(single.value) & set(aliases):
            raise ActionError(f"{name} is bound twice or from another name of the loop's body")
        whole_args = [a for a in call.args if isinstance(a.value, cst.Name) and a.value.value == name]
        if len(whole_args) != 1 or c.count_name(call, name) != 1 or c.count_name(host, name) != 2:
            raise ActionError(f"{name} is read other than once, as a whole argument of the launch")
        aliases[name] = single.value
    return aliases


def _launch_line(host: cst.FunctionDef, call: cst.Call) -> cst.SimpleStatementLine | None:
    """The statement line (at any depth of the host) that is the launch call alone."""
    found: list[cst.SimpleStatementLine] = []

    class V(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
            if len(node.body) == 1 and isinstance(node.body[0], cst.Expr) and node.body[0].value is call:
                found.append(node)
            return False

    host.visit(V())
    return found[0] if found else None


def _range_count(loop: cst.For) -> cst.BaseExpression | None:
    """B of ``range(B)`` or ``range(0, B)``."""
    it = loop.iter
    if not (isinstance(it, cst.Call) and c.code(it.func) == "range") or any(a.keyword for a in it.args):
        return None
    if len(it.args) == 1:
        return it.args[0].value
    if len(it.args) == 2 and c.flat(it.args[0].value) == "0":
        return it.args[1].value
    return None


def _sliced(value: cst.BaseExpression, var: str) -> tuple[cst.BaseExpression, int] | None:
    """(the tensor without the loop's index, the dimension it indexed) for ``T[i, ..., var, :, ...]``: ``var`` once,
    indices before it free of ``var``, only full slices after it."""
    if not isinstance(value, cst.Subscript) or not isinstance(value.value, cst.Name):
        return None
    elements = list(value.slice)
    at = [i for i, e in enumerate(elements) if isinstance(e.slice, cst.Index) and c.flat(e.slice.value) == var]
    if len(at) != 1:
        return None
    position = at[0]
    for e in elements[:position]:
        if not isinstance(e.slice, cst.Index) or var in c.names_in(e.slice.value) or isinstance(e.slice.value, cst.Ellipsis):
            return None
    for e in elements[position + 1:]:
        if not (isinstance(e.slice, cst.Slice) and e.slice.lower is None and e.slice.upper is None and e.slice.step is None):
            return None
    if position == 0:
        return value.value, 0
    kept = [e.with_changes(comma=cst.MaybeSentinel.DEFAULT) if i == position - 1 else e
            for i, e in enumerate(elements[:position])]
    return value.with_changes(slice=kept), position


class BatchLaunches(c.ExplainsByPlan):
    name = "batch_launches"
    kind = "Fusion"
    changes_numerics = False

    def _plan(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel) -> _Plan:
        kdef, launches = c.locate(module, kernel.name)
        if len(launches) != 1:
            raise ActionError("needs exactly one launch of the kernel in this file")
        launch = launches[0]
        if launch.host is None:
            raise ActionError("the launch is not inside a function")
        line = _launch_line(launch.host, launch.call)
        loop = _loop_of(launch.host, line) if line is not None else None
        if loop is None:
            raise ActionError("the launch is not the last statement of a host loop")
        if not isinstance(loop.target, cst.Name) or loop.orelse is not None:
            raise ActionError("the loop's target is not one name")
        aliases = _aliases(loop, launch.call, launch.host)
        # The launch as if each alias were written in place (``xb = x[b]``; ``k[grid](xb)`` reads as ``k[grid](x[b])``).
        call = c.replace_all(cst.Module(body=[cst.SimpleStatementLine([cst.Expr(launch.call)])]), [
            (a.value, aliases[a.value.value]) for a in launch.call.args
            if isinstance(a.value, cst.Name) and a.value.value in aliases]).body[0].body[0].value
        var = loop.target.value
        count = _range_count(loop)
        if count is None:
            raise ActionError("the loop is not `for v in range(n)`")
        if kernel.calls_of("num_programs"):
            raise ActionError("the kernel reads tl.num_programs")
        grid = c.grid_expression(launch)
        body = grid.body if isinstance(grid, cst.Lambda) else grid
        if not isinstance(body, cst.Tuple) or not 1 <= len(body.elements) <= 2:
            raise ActionError("the grid is not a tuple of one or two axes")
        if var in c.names_in(grid) or (c.grid_name(launch) and c.grid_shared(launch, kernel.name)):
            raise ActionError("the grid reads the loop variable or is shared")
        subscript = call.func.slice[0].slice.value  # type: ignore[union-attr]
        if isinstance(subscript, cst.Name):
            assign, _at_module = c.launch_assignment(launch, subscript.value)
            if assign is None or not _before(launch.host, assign, loop):
                raise ActionError(f"the grid {subscript.value} is not assigned once before the loop")
        axis = len(body.elements)
        axes_read = c.program_id_axes(kdef)
        if axis in axes_read or None in axes_read:
            raise ActionError(f"the kernel already reads program id {axis} (or one not written as a literal)")
        pid = f"pid_{var}"
        taken = c.names_in(kdef)
        if pid in taken:
            raise ActionError(f"the kernel already uses the name {pid}")
        slices: list[_Slice] = []
        for arg in call.args:
            if arg.star:
                raise ActionError("the launch spreads arguments (*args / **kwargs)")
            if var not in c.names_in(arg.value):
                continue
            param = c.arg_param(arg, call, kernel)
            found = _sliced(arg.value, var)
            if param is None or found is None:
                raise ActionError(f"`{c.code(arg.value)}` reads the loop variable other than as a slice x[{var}] of a tensor")
            if kernel.param(param) is None or kernel.param(param).kind != "pointer":
                raise ActionError(f"`{c.code(arg.value)}` is passed for {param}, not a pointer of the kernel")
            whole, dim = found
            stride_param = f"{param}_stride_{var}"
            if stride_param in taken or kernel.param(stride_param) is not None:
                raise ActionError(f"the kernel already uses the name {stride_param}")
            slices.append(_Slice(arg, param, whole, f"{c.code(arg.value.value)}.stride({dim})", stride_param))
        if not slices:
            raise ActionError("no argument is a slice the loop picks")
        written = _written_params(kernel, analysis.text)
        # A tensor whose slice the kernel writes is passed no other way (another iteration could read what it writes).
        written_tensors = {s.arg.value.value.value for s in slices if s.param in written}  # type: ignore[union-attr]
        for arg in call.args:
            if c.names_in(arg.value) & written_tensors and not _metadata(arg.value) and \
                    not any(arg is s.arg and s.param in written for s in slices):
                raise ActionError(f"`{c.code(arg.value)}` passes a tensor whose slices the kernel writes another way")
        shared_written = written - {s.param for s in slices}
        if shared_written:
            raise ActionError(f"the kernel writes {', '.join(sorted(shared_written))}, which every iteration shares: "
                              "they may depend on each other")
        return _Plan(kdef, launch, loop, var, count, body, slices, pid, call, line)

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            plan = self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError:
            return []
        return [Candidate(self.name, self.kind, kernel.name, {"loop": plan.var},
                          f"Launch {kernel.name} once for the whole `for {plan.var} in range({c.code(plan.count)})` loop "
                          f"(grid axis {len(plan.grid_tuple.elements)})", c.kernel_line(kernel))]

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        module = c.parse(text)
        plan = self._plan(module, analysis, kernel)
        if params.get("loop") != plan.var:
            raise ActionError(f"the launch's loop is over {plan.var}, not {params.get('loop')!r}")
        tl = "tl" if "tl." in c.code(plan.kdef.body) else "triton.language"
        axis = len(plan.grid_tuple.elements)
        # The kernel: new stride parameters at the end (passed by keyword), each sliced pointer moved first thing.
        prologue = [c.stmt(f"{plan.pid} = {tl}.program_id({axis})")]
        # In int64: the whole tensor may pass 2**31 elements where each slice did not.
        prologue += [c.stmt(f"{s.param} += {plan.pid}.to({tl}.int64) * {s.stride_param}") for s in plan.slices]
        body = list(plan.kdef.body.body)
        at = 1 if body and c.is_docstring(body[0]) else 0
        new_body = body[:at] + prologue + body[at:]
        new_kdef = c.with_params_appended(plan.kdef.with_changes(body=plan.kdef.body.with_changes(body=new_body)),
                                          [cst.Param(cst.Name(s.stride_param)) for s in plan.slices])
        # The host: the loop replaced by its launch, which passes the whole tensors and their strides; one more axis.
        elements = [e.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for e in plan.grid_tuple.elements]
        new_tuple = plan.grid_tuple.with_changes(elements=elements + [cst.Element(plan.count)])
        in_launch = plan.grid_tuple in _subnodes(plan.launch.call.func)
        new_call = c.replace_all(cst.Module(body=[cst.SimpleStatementLine([cst.Expr(plan.call)])]),
                                 [(s.arg, s.arg.with_changes(value=s.whole)) for s in plan.slices]).body[0].body[0].value
        if in_launch:  # the grid written in the launch: ``kernel[(S,)]`` -> ``kernel[(S, B)]``
            new_call = new_call.with_changes(func=c.replace_all(
                cst.Module(body=[cst.SimpleStatementLine([cst.Expr(plan.launch.call.func)])]),
                [(plan.grid_tuple, new_tuple)]).body[0].body[0].value)
        for s in plan.slices:
            new_call = c.set_kwarg(new_call, s.stride_param, c.expr(s.stride))
        pairs: list = [(plan.kdef, new_kdef)]
        if not in_launch:
            pairs.append((plan.grid_tuple, new_tuple))
        new_line = plan.line.with_changes(body=[cst.Expr(new_call)], leading_lines=plan.loop.leading_lines)
        pairs.append((plan.loop, new_line))
        module = c.replace_all(module, pairs)
        notes = [f"the {c.code(plan.count)} launches of the loop run as one grid: {plan.pid} = program id {axis}"]
        return c.finish(text, module, f"batched the launches of {kernel.name} over {plan.var}", notes)


def _metadata(value: cst.BaseExpression) -> bool:
    """``x.stride(1)``, ``x.shape[-1]``, ``x.size(0)``, ``x.numel()``, ``x.dtype``: a number about a tensor, not its data."""
    value = c.unparen(value)
    if isinstance(value, cst.Subscript):
        value = value.value
    if isinstance(value, cst.Call):
        value = value.func
    return isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name) and value.attr.value in _METADATA


def _subnodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []

    class V(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            found.append(n)
            return True

    node.visit(V())
    return found


def _before(host: cst.FunctionDef, assign: cst.Assign, loop: cst.For) -> bool:
    """``assign`` is a statement of the host that comes before ``loop`` (and not inside it)."""
    statement = c.statement_holding(host, assign)
    nodes = _subnodes(host)
    return statement is not None and statement not in _subnodes(loop) and nodes.index(statement) < nodes.index(loop)


def _written_params(kernel: Kernel, text: str) -> set[str]:
    """Pointer parameters the kernel stores through (directly or through names derived from them)."""
    pointers = []  # the names each store's address reads; None where it cannot be read (every pointer may be written)
    for call in kernel.calls_of("store", "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas",
                                "atomic_and", "atomic_or", "atomic_xor"):
        try:
            pointers.append(c.names_in(c.expr(call.pointer)) if call.pointer else set())
        except cst.ParserSyntaxError:
            pointers.append(None)
    written = set()
    for p in kernel.pointer_params:
        derived = c.block_derived_names(kernel, text, {p.name}) - {"arange"}
        if any(read is None or read & derived for read in pointers):
            written.add(p.name)
    return written


ACTION = BatchLaunches()
