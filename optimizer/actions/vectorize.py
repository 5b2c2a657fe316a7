"""Vectorize: a kernel that handles one element per program handles a block of them.

``k[(n,)](...)`` with ``pid = tl.program_id(0)`` and scalar loads at ``ptr + pid`` launches a program per element:
each moves one value, a few bytes, and the GPU spends its time scheduling programs. The program id becomes a block
of offsets, ``pid = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)``, every load and store whose address depends on
it (a gather through a loaded index too) is masked with ``pid < n_programs``, and the grid launches
``cdiv(n, BLOCK)`` programs; ``n_programs`` (the old grid size) and ``BLOCK`` are new parameters passed by keyword.
Each element computes exactly what its program did. Offered when the kernel is not a consumer of a reducing kernel
(it reads no tensor an earlier launch of its host function is given, when that kernel reduces: the row fusions fold
such a kernel into its producer, which a block per program would stop; after an elementwise producer each link is
vectorized and the elementwise fusion joins them), the grid is a one-axis tuple, the program id is
read once, as ``pid = tl.program_id(0)``, and no statement mixes elements or branches on them: no ``tl.arange``,
reduction, scan, ``tl.dot``, atomic, ``tl.num_programs``, and no ``if``/``while``/``for`` whose test or bounds
read a value derived from the program id.

Example: kernel=elu_kernel target=h100 params={"BLOCK": 1024}

```python before
@triton.jit
def elu_kernel(x_ptr, y_ptr, alpha):
    pid = tl.program_id(0)
    x = tl.load(x_ptr + pid)
    tl.store(y_ptr + pid, tl.where(x > 0, x, alpha * (tl.exp(x) - 1.0)))


def elu(x, alpha=1.0):
    y = torch.empty_like(x)
    elu_kernel[(x.numel(),)](x, y, alpha)
    return y
```

```python after
@triton.jit
def elu_kernel(x_ptr, y_ptr, alpha, n_programs, BLOCK: tl.constexpr):
    pid = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + pid, mask=pid < n_programs)
    tl.store(y_ptr + pid, tl.where(x > 0, x, alpha * (tl.exp(x) - 1.0)), mask=pid < n_programs)


def elu(x, alpha=1.0):
    y = torch.empty_like(x)
    elu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, alpha, n_programs=x.numel(), BLOCK=1024)
    return y
```
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import REDUCTION_OPS, Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit

BLOCKS = (1024, 256)
SIZE_PARAM = "n_programs"
BLOCK_PARAM = "BLOCK"
# tl calls that combine elements of a block, or whose meaning changes when a scalar becomes a block.
_MIXING = ("arange", "sum", "max", "min", "argmax", "argmin", "reduce", "cumsum", "cumprod", "associative_scan",
           "dot", "num_programs", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and",
           "atomic_or", "atomic_xor", "make_block_ptr", "make_tensor_descriptor", "histogram", "sort", "reshape",
           "view", "broadcast_to", "expand_dims", "permute", "trans", "split", "join", "cat", "zeros", "full",
           "static_assert", "device_assert", "device_print")

# What makes an earlier kernel of a chain a row-statistics producer (the row fusions' case).
_REDUCING = REDUCTION_OPS | {"dot"}


@dataclass
class _Plan:
    kdef: cst.FunctionDef
    launch: c.LaunchNode
    pid: str
    pid_line: cst.Assign
    grid_tuple: cst.Tuple
    count: cst.BaseExpression  # the grid's one axis: the number of programs (elements)
    accesses: list[cst.Call]  # loads and stores whose address derives from the program id


class Vectorize(c.ExplainsByPlan):
    name = "vectorize"
    kind = "Tiling"
    changes_numerics = False

    def _plan(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel) -> _Plan:
        kdef, launches = c.locate(module, kernel.name)
        if len(launches) != 1:
            raise ActionError("needs exactly one launch of the kernel in this file")
        launch = launches[0]
        if kernel.is_autotuned or kernel.heuristics:
            raise ActionError("the kernel is autotuned or has heuristics")
        for name in (SIZE_PARAM, BLOCK_PARAM):
            if name in c.names_in(kdef) or kernel.param(name) is not None:
                raise ActionError(f"the kernel already uses the name {name}")
        sites = analysis.launches_of(kernel.name)
        if len(sites) != 1:
            raise ActionError("needs exactly one launch of the kernel in this file")
        site = sites[0]
        passed = {a.source for a in site.args if a.source.isidentifier()}
        for other in analysis.launches:
            # A kernel that reads what an earlier launch of the host wrote is a chain's consumer. After a kernel that
            # reduces (row statistics) the row fusions fold it into that producer (row_fusion takes the suite cross
            # entropy's per-row nll kernel), which a block per program would stop. After an elementwise kernel it is
            # vectorized like the producer, and the elementwise fusion joins the two blocks.
            producer = analysis.kernel(other.kernel)
            if other.kernel != kernel.name and other.host_function == site.host_function and \
                    other.span.start_offset < site.span.start_offset and \
                    (producer is None or any(call.op in _REDUCING for call in producer.calls)):
                shared = sorted(passed & {a.source for a in other.args})
                if shared:
                    raise ActionError(f"it reads {shared[0]}, which {other.kernel} is launched with first and "
                                      "reduces: left to the row fusions of the chain")
        mixing = sorted({call.op for call in kernel.calls if call.op in _MIXING})
        if mixing:
            raise ActionError(f"the kernel calls tl.{mixing[0]}: it already works on blocks, or combines elements")
        program_ids = [call for call in c.calls_in(kdef) if c.code(call.func).endswith("program_id")]
        pid_lines = [s.body[0] for s in kdef.body.body if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                     and isinstance(s.body[0], cst.Assign) and len(s.body[0].targets) == 1
                     and isinstance(s.body[0].targets[0].target, cst.Name) and s.body[0].value in program_ids]
        if len(program_ids) != 1 or len(pid_lines) != 1:
            raise ActionError("the program id is not read once, as `pid = tl.program_id(0)`")
        pid_line = pid_lines[0]
        call = pid_line.value
        axis = [a for a in call.args if a.keyword is None or a.keyword.value == "axis"]
        if len(axis) != 1 or c.flat(axis[0].value) != "0":
            raise ActionError("the program id is not of axis 0")
        pid = pid_line.targets[0].target.value
        if sum(pid in c.bound_names(s) for s in kdef.body.body) != 1 or pid in {p.name for p in kernel.params}:
            raise ActionError(f"{pid} is assigned more than once")
        grid = c.grid_expression(launch)
        if not isinstance(grid, cst.Tuple) or len(grid.elements) != 1:
            raise ActionError("the grid is not a tuple of one axis")
        if c.grid_name(launch) and c.grid_shared(launch, kernel.name):
            raise ActionError("the grid is shared with another launch")
        tainted = c.block_derived_names(kernel, analysis.text, {pid})
        for statement in _compound_statements(kdef):
            header = statement.test if isinstance(statement, cst.If | cst.While) else statement.iter  # type: ignore[union-attr]
            if c.names_in(header) & tainted:
                raise ActionError(f"`{c.code(header)}` branches or loops on a per-element value")
        accesses = [node for node in c.calls_in(kdef) if c.code(node.func).split(".")[-1] in ("load", "store")
                    and node.args and c.names_in(node.args[0].value) & tainted]
        if not accesses:
            raise ActionError("no load or store is addressed by the program id")
        for access in accesses:
            if any(a.keyword is not None and a.keyword.value in ("boundary_check", "padding_option") for a in access.args):
                raise ActionError("a block-pointer access")
        return _Plan(kdef, launch, pid, pid_line, grid, grid.elements[0].value, accesses)

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError:
            return []
        return [Candidate(self.name, self.kind, kernel.name, {BLOCK_PARAM: b},
                          f"Process {b} elements per program instead of one ({BLOCK_PARAM}={b})", c.kernel_line(kernel))
                for b in BLOCKS]

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        block = params.get(BLOCK_PARAM)
        if not c.is_pow2(block) or not 16 <= block <= 8192:
            raise ActionError(f"{BLOCK_PARAM} must be a power of two from 16 to 8192, not {block!r}")
        module = c.parse(text)
        plan = self._plan(module, analysis, kernel)
        tl = c.code(plan.pid_line.value.func.value)  # type: ignore[union-attr]
        mask = c.expr(f"{plan.pid} < {SIZE_PARAM}")
        pairs: list = [(plan.pid_line.value, c.expr(f"{c.code(plan.pid_line.value)} * {BLOCK_PARAM} + "
                                                    f"{tl}.arange(0, {BLOCK_PARAM})"))]
        for access in plan.accesses:
            is_store = c.code(access.func).endswith("store")
            existing = c.kwarg(access, "mask")
            positional = [a for a in access.args if a.keyword is None]
            if existing is None and len(positional) > (2 if is_store else 1):
                existing = positional[2 if is_store else 1]
            if existing is not None:
                combined = existing.with_changes(value=c.expr(f"({c.code(existing.value)}) & ({c.code(mask)})"))
                pairs.append((existing, combined))
            else:
                pairs.append((access, c.set_kwarg(access, "mask", mask)))
        kdef = c.replace_all(cst.Module(body=[plan.kdef]), pairs).body[0]
        kdef = c.with_params_appended(kdef, [cst.Param(cst.Name(SIZE_PARAM)), cst.Param(
            cst.Name(BLOCK_PARAM), annotation=cst.Annotation(c.expr(f"{tl}.constexpr")))])
        count = c.code(plan.count)
        new_tuple = plan.grid_tuple.with_changes(elements=[plan.grid_tuple.elements[0].with_changes(
            value=c.expr(f"triton.cdiv({count}, {block})"))])
        call = c.set_kwarg(c.set_kwarg(plan.launch.call, SIZE_PARAM, c.expr(count)), BLOCK_PARAM, cst.Integer(str(block)))
        out: list = [(plan.kdef, kdef)]
        grid_in_call = plan.launch.call.func.slice[0].slice.value  # type: ignore[union-attr]
        if grid_in_call is plan.grid_tuple:
            call = call.with_changes(func=c.replace_all(cst.Module(body=[cst.SimpleStatementLine([cst.Expr(
                plan.launch.call.func)])]), [(plan.grid_tuple, new_tuple)]).body[0].body[0].value)
        else:
            out.append((plan.grid_tuple, new_tuple))
        out.append((plan.launch.call, call))
        module = c.replace_all(module, out)
        if c.module_import_name(module, "triton") is None:
            raise ActionError("the file does not import triton (the grid uses triton.cdiv)")
        notes = [f"{plan.pid} is now a block of {block} element indices; accesses it addresses are masked with "
                 f"{c.code(mask)} ({SIZE_PARAM} = the old grid size)"]
        return c.finish(text, module, f"vectorized {kernel.name} ({BLOCK_PARAM}={block})", notes)


def _compound_statements(kdef: cst.FunctionDef) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []

    class V(cst.CSTVisitor):
        def visit_If(self, node: cst.If) -> None:
            found.append(node)

        def visit_While(self, node: cst.While) -> None:
            found.append(node)

        def visit_For(self, node: cst.For) -> None:
            found.append(node)

    kdef.body.visit(V())
    return found


ACTION = Vectorize()
