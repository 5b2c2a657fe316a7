"""Persistent tiles: one program per SM walks the output tiles of a tile grid, instead of one program per tile.

The kernel's body after ``pid = tl.program_id(0)`` becomes the body of
``for pid in tl.range(tl.program_id(0), <tiles>, tl.num_programs(0), flatten=...)``: every tile id the old
grid launched is still computed exactly once, by the same code, with the same ``pid``. ``<tiles>`` is the old
grid's size written in the kernel's own arguments (``triton.cdiv`` becomes ``tl.cdiv``, ``META["BLOCK_M"]``
the constexpr), and the launch becomes ``(min(_num_sms(), <old size>),)``; ``_num_sms()`` is added once to
the file (the GPU's multiprocessor count, 4 without a GPU). Top-level statements that do not depend on the
tile (sizes, ``tl.arange`` offsets, TMA descriptors built from arguments) move before the loop, so each
program does them once. ``flatten=True`` lets Triton pipeline across tiles, overlapping one tile's epilogue
with the next one's loads (H200, C = A @ B^T 8192x8192x4096 fp16, `results/h200/warp_specialize/`: a
persistent descriptor kernel 0.736 ms flattened, 0.763 ms not, cuBLAS 0.808 ms).

Offered on sm_80+ for a kernel with a ``tl.dot`` that reads its program ids as ``name = tl.program_id(0)`` at its
top level, and ``(1)`` (and ``(2)``) for a 2-D (3-D) grid (the loop's ``tile`` then gives ``pid_m = tile % <axis 0>``,
``pid_n = tile // <axis 0>`` (``tile // <axis 0> % <axis 1>`` and ``pid_b = tile // (<axis 0> * <axis 1>)`` in 3-D): axis 0
fastest, the order a grid's programs start in), never ``tl.num_programs``, has no
``return`` and no ``tl.atomic_cas``/``tl.atomic_xchg`` (a spin lock across programs could wait on a tile no
program runs yet), launched once in the file with a one-axis grid (a tuple, a ``lambda META:`` or a grid
name only this launch reads) whose size the kernel's arguments determine.

Example: kernel=mm_kernel target=h100 params={"flatten": true}

```python before
@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def mm(a, b, c, M, N, K):
    mm_kernel[(triton.cdiv(M, 64) * triton.cdiv(N, 64),)](a, b, c, M, N, K, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
```

```python after
def _num_sms() -> int:
    \"\"\"The GPU's multiprocessor count: how many programs a persistent kernel runs (4 without a GPU).\"\"\"
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return 4


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    num_pid_n = tl.cdiv(N, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    for pid in tl.range(tl.program_id(0), tl.cdiv(M, 64) * tl.cdiv(N, 64), tl.num_programs(0), flatten=True):
        pid_m = pid // num_pid_n
        pid_n = pid % num_pid_n
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def mm(a, b, c, M, N, K):
    mm_kernel[(min(_num_sms(), triton.cdiv(M, 64) * triton.cdiv(N, 64)),)](a, b, c, M, N, K, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
```
"""

from __future__ import annotations

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit

HELPER = "_num_sms"
_HELPER_SOURCE = f'''def {HELPER}() -> int:
    """The GPU's multiprocessor count: how many programs a persistent kernel runs (4 without a GPU)."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return 4
'''
# Calls a statement may make and still move before the tile loop: no memory access, no side effect.
_HOISTABLE_CALLS = frozenset({
    "arange", "cdiv", "zeros", "full", "minimum", "maximum", "make_tensor_descriptor", "multiple_of", "max_contiguous",
    "constexpr", "to",
})
# Ops that make cross-program waiting possible: a persistent grid could then wait on a tile no program runs.
_SPIN_OPS = ("atomic_cas", "atomic_xchg")
_GRID_OPS = {cst.Add: "+", cst.Subtract: "-", cst.Multiply: "*", cst.FloorDivide: "//"}


class _Plan:
    def __init__(self, kdef, launch, pid_statement, pid_name, before, hoisted, looped, tiles, grid, grid_size, tl,
                 passed=()):
        self.kdef = kdef
        self.launch = launch
        self.pid_statement = pid_statement
        self.pid_name = pid_name
        self.before = before  # statements above the program-id read, kept where they are
        self.hoisted = hoisted  # statements after it that do not depend on the tile: before the loop
        self.looped = looped  # the tile's own statements: the loop's body
        self.tiles = tiles  # the tile count in the kernel's terms
        self.grid = grid  # the grid node to replace
        self.grid_size = grid_size  # a 1-D grid's axis (inside the tuple), or a 2-D grid's whole tuple
        self.tl = tl
        self.passed = list(passed)  # (new kernel parameter, host expression): grid axes the kernel cannot compute


def _reads_any(node: cst.CSTNode, names: set[str]) -> bool:
    return bool(c.names_in(node) & names)


def _calls_allowed(node: cst.CSTNode) -> bool:
    """Only calls that neither touch memory nor have side effects (``tl.arange``, ``tl.cdiv``, descriptors...)."""
    for call in c.calls_in(node):
        func = call.func
        name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
        if name not in _HOISTABLE_CALLS and name not in ("min", "max"):
            return False
    return True


def _simple_assignments(statement: cst.BaseStatement) -> bool:
    """A line of plain assignments, or an ``if`` (no ``elif``/``else`` chains deeper than one) of them."""
    if isinstance(statement, cst.SimpleStatementLine):
        return all(isinstance(s, cst.Assign | cst.AnnAssign) for s in statement.body)
    if isinstance(statement, cst.If):
        parts = [statement.body] + ([statement.orelse.body] if isinstance(statement.orelse, cst.Else) else [])
        if isinstance(statement.orelse, cst.If):
            return False
        return all(_simple_assignments(s) for part in parts for s in part.body)
    return False


def _split_if(statement: cst.BaseStatement, movable, tile_names: set[str]) -> tuple[cst.If, cst.If] | None:
    """``if FLAG: x = <movable>; <rest>`` -> (``if FLAG: x = ...``, ``if FLAG: <rest>``), the flag tile-independent."""
    if not isinstance(statement, cst.If) or _reads_any(statement.test, tile_names):
        return None
    inner = list(statement.body.body)
    lead = 0
    while lead < len(inner) - 1 and movable(inner[lead]):
        lead += 1
    if lead == 0:
        return None
    moved = cst.If(test=statement.test, body=statement.body.with_changes(body=inner[:lead]),
                   leading_lines=statement.leading_lines)
    kept = statement.with_changes(body=statement.body.with_changes(
        body=[inner[lead].with_changes(leading_lines=())] + inner[lead + 1:]))
    return moved, kept


def _merge_ifs(statements: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """Two adjacent ``if FLAG:`` blocks without ``else`` (one moved out of a later statement) become one."""
    out: list[cst.BaseStatement] = []
    for statement in statements:
        last = out[-1] if out else None
        if (isinstance(statement, cst.If) and isinstance(last, cst.If) and statement.orelse is None
                and last.orelse is None and c.code(statement.test) == c.code(last.test)):
            out[-1] = last.with_changes(body=last.body.with_changes(body=[*last.body.body, *statement.body.body]))
        else:
            out.append(statement)
    return out


def _program_id(statement: cst.CSTNode, roots: frozenset[str]) -> tuple[str, int] | None:
    """``name = tl.program_id(axis)`` (also ``axis=axis``) -> (name, axis) for axis 0, 1 or 2."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    assign = statement.body[0]
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    call = assign.value
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "program_id"
            and c.code(call.func.value) in roots and len(call.args) == 1):
        return None
    axis = call.args[0]
    if not isinstance(axis.value, cst.Integer) or axis.value.evaluated_value not in (0, 1, 2) or (
            axis.keyword and axis.keyword.value != "axis"):
        return None
    return assign.targets[0].target.value, axis.value.evaluated_value


class _InKernel:
    """The grid's size written in the kernel's terms: what each host name stands for at this launch."""

    def __init__(self, launch: c.LaunchNode, kernel: Kernel, meta: str | None, tl: str):
        self.sources = {src: param for param, src in c.launch_sources(launch, kernel).items()
                        if kernel.param(param) is not None}
        self.launch = launch
        self.kernel = kernel
        self.meta = meta
        self.tl = tl

    def __call__(self, node: cst.BaseExpression, depth: int = 0) -> str:
        node = c.unparen(node)
        if isinstance(node, cst.Integer):
            return node.value
        flat = "".join(c.code(node).split())
        hits = [param for src, param in self.sources.items() if src == flat]
        if hits:
            return hits[0]
        if (self.meta and isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name)
                and node.value.value == self.meta and len(node.slice) == 1
                and isinstance(node.slice[0].slice, cst.Index)
                and isinstance(node.slice[0].slice.value, cst.SimpleString)):
            key = node.slice[0].slice.value.evaluated_value
            if key in self.kernel.constexpr_names:
                return key
        if isinstance(node, cst.Call) and c.code(node.func) in ("triton.cdiv", "cdiv") and len(node.args) == 2:
            return f"{self.tl}.cdiv({self(node.args[0].value, depth)}, {self(node.args[1].value, depth)})"
        if isinstance(node, cst.BinaryOperation) and type(node.operator) in _GRID_OPS:
            return f"{self(node.left, depth)} {_GRID_OPS[type(node.operator)]} {self._operand(node.right, depth)}"
        if isinstance(node, cst.Name) and depth < 3 and self.launch.host is not None:
            assign = c.host_assignment(self.launch.host, node.value)
            if assign is not None:
                return f"({self(assign.value, depth + 1)})"
        raise ActionError(f"the grid's `{c.code(node)}` is not computed from what the launch passes the kernel")

    def _operand(self, node: cst.BaseExpression, depth: int) -> str:
        text = self(node, depth)
        return f"({text})" if isinstance(c.unparen(node), cst.BinaryOperation) else text


class Persistent:
    name = "persistent"
    kind = "Reordering"
    changes_numerics = False
    max_changed_lines = 80  # the tile's statements move under the loop: re-indented, otherwise unchanged
    # TMA loads in the tile loop: on the H200's square fp16 matmul persistent tiles alone ran 0.91x and descriptors
    # alone 0.96x of grouped order, both together 1.13x (benchmarks/results/h200/persistent_ablation/).
    pays_with = frozenset({"tensor_descriptor"})

    def _plan(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> _Plan:
        if target.arch < 80:
            raise ActionError(f"a persistent tile loop needs async copies to overlap tiles; {target.name} has none")
        if not kernel.calls_of("dot"):
            raise ActionError("no tl.dot: persistent tiles are for matmul-like kernels (rows_per_program walks rows)")
        if kernel.calls_of("num_programs"):
            raise ActionError("the kernel reads tl.num_programs, which a persistent grid changes")
        if len(kernel.calls_of("program_id")) not in (1, 2, 3):
            raise ActionError("the kernel reads more than three program ids")
        spin = kernel.calls_of(*_SPIN_OPS)
        if spin:
            raise ActionError(f"tl.{spin[0].op} may wait on another program: a persistent grid could deadlock it")
        if HELPER in analysis.text:
            raise ActionError(f"the file already has {HELPER} (a kernel made persistent already)")
        if c.module_import_name(module, "torch") != "torch":
            raise ActionError("the file does not `import torch`, which sizes the persistent grid")
        kdef, launches = c.locate(module, kernel.name)
        if len(launches) != 1:
            raise ActionError("a persistent grid needs exactly one launch of the kernel in this file")
        launch = launches[0]
        if c.contains(kdef.body, cst.Return):
            raise ActionError("the kernel returns early: inside the tile loop that would skip the program's later tiles")
        roots = c.language_roots(analysis)
        body = list(kdef.body.body)
        reads = {i: hit for i, s in enumerate(body) if (hit := _program_id(s, roots))}
        axes = sorted(axis for _, axis in reads.values())
        if axes not in ([0], [0, 1], [0, 1, 2]) or len(reads) != len(kernel.calls_of("program_id")):
            raise ActionError("the program ids are not read as `name = tl.program_id(0)` (and `(1)`, `(2)`) at the top "
                              "of the kernel")
        index = min(reads)
        pid_statement = body[index]
        names = {axis: name for name, axis in reads.values()}
        if c.grid_shared(launch, kernel.name):
            raise ActionError("the grid is a name other launches read too")
        grid = c.grid_expression(launch)
        lam = grid if isinstance(grid, cst.Lambda) else None
        raw_shape = lam.body if lam is not None else grid
        shape = c.unparen(raw_shape)
        if not isinstance(shape, cst.Tuple | cst.List) or len(shape.elements) != len(axes):
            count = ("one axis", "two axes", "three axes")[len(axes) - 1]
            raise ActionError(f"the grid is not {count}, one per program id read")
        meta = None
        if lam is not None:
            if len(lam.params.params) != 1:
                raise ActionError("the grid lambda does not take one META argument")
            meta = lam.params.params[0].name.value
        tl = c.code(pid_statement.body[0].value.func.value)  # type: ignore[union-attr]
        in_kernel = _InKernel(launch, kernel, meta, tl)
        sizes, passed = [], []
        taken = c.names_in(kdef) | {p.name for p in kernel.params}
        for axis, element in zip(axes, shape.elements):
            try:
                sizes.append(in_kernel(element.value))
            except ActionError:
                # bmm's batch axis is ``B``, which no kernel argument carries: the launch passes it as a new one.
                if axis == 0 or meta is not None and meta in c.names_in(element.value):
                    raise
                name = c.first_free(taken, f"{names[axis]}_count", f"grid_axis{axis}")
                taken.add(name)
                sizes.append(name)
                passed.append((name, c.code(element.value)))
        if len(axes) == 1:
            loop_name, tiles, unpack = names[0], sizes[0], []
        else:  # tiles in launch order: axis 0 fastest, as a 2-D or 3-D grid's programs start
            loop_name = c.first_free(c.names_in(kdef) | {p.name for p in kernel.params}, "tile", "tile_id", "tile_index")
            factors = [_atom(size) for size in sizes]
            tiles = " * ".join(factors)
            unpack = [c.stmt(f"{names[axis]} = {_tile_axis(loop_name, factors, axis)}") for axis in axes]
        rest = [s for i, s in enumerate(body) if i > index and i not in reads]
        # Which statements move before the loop: no tile dependence, no memory access, bound only there.
        counts = c.assignment_counts(kdef)
        tile_names = {loop_name, *names.values()}
        hoisted, looped = [], list(unpack)
        def movable(statement: cst.BaseStatement) -> bool:
            return (_simple_assignments(statement) and _calls_allowed(statement)
                    and not _reads_any(statement, tile_names)
                    and all(counts.get(n, 0) == 1 for n in c.bound_names(statement)))

        for statement in rest:
            if movable(statement):
                hoisted.append(statement)
                continue
            split = _split_if(statement, movable, tile_names)
            if split is not None:  # ``if USE_TMA: c_desc = ...; c_desc.store(...)``: the descriptor moves out
                hoisted.append(split[0])
                statement = split[1]
            looped.append(statement)
            tile_names |= c.bound_names(statement)
        if len(looped) == len(unpack):
            raise ActionError("nothing in the kernel depends on the tile")
        hoisted = _merge_ifs(hoisted)
        size = shape.elements[0].value if len(axes) == 1 else raw_shape
        return _Plan(kdef, launch, pid_statement, loop_name, body[:index], hoisted, looped, tiles, grid, size, tl, passed)

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            self._plan(c.parse(analysis.text), analysis, kernel, target)
        except ActionError:
            return []
        line = min(call.span.start.line for call in kernel.calls_of("program_id"))
        return [Candidate(self.name, self.kind, kernel.name, {"flatten": flatten},
                          f"Make {kernel.name} persistent on {target.key.upper()}: one program per SM walks the tiles"
                          + (" (pipelined across tiles)" if flatten else ""), line)
                for flatten in (True, False)]

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        try:
            self._plan(c.parse(analysis.text), analysis, kernel, target)
        except ActionError as exc:
            return str(exc)
        return None

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        flatten = params.get("flatten", True)
        if not isinstance(flatten, bool):
            raise ActionError(f"flatten must be true or false, not {flatten!r}")
        module = c.parse(text)
        plan = self._plan(module, analysis, kernel, target)
        tl = plan.tl
        header = (f"for {plan.pid_name} in {tl}.range({tl}.program_id(0), {plan.tiles}, {tl}.num_programs(0)"
                  f"{', flatten=True' if flatten else ''}):\n    pass\n")
        loop = cst.parse_statement(header)
        looped = [plan.looped[0].with_changes(leading_lines=())] + plan.looped[1:]
        loop = loop.with_changes(body=loop.body.with_changes(body=looped),
                                 leading_lines=plan.pid_statement.leading_lines)
        new_body = plan.before + plan.hoisted + [loop]
        if plan.hoisted:
            new_body[len(plan.before)] = plan.hoisted[0].with_changes(leading_lines=plan.pid_statement.leading_lines)
            new_body[-1] = loop.with_changes(leading_lines=())
        new_kdef = plan.kdef.with_changes(body=plan.kdef.body.with_changes(body=new_body))
        if plan.passed:  # grid axes only the host knows: new arguments, passed by name at the launch
            params = list(new_kdef.params.params)
            last = params[-1]
            params[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            params += [cst.Param(cst.Name(name), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                       for name, _source in plan.passed]
            params[-1] = params[-1].with_changes(comma=last.comma)
            new_kdef = new_kdef.with_changes(params=new_kdef.params.with_changes(params=params))
        size = plan.grid_size
        if isinstance(size, cst.Tuple | cst.List):  # the axes become one: their product, capped at the SMs
            product = " * ".join(_atom(c.code(e.value)) for e in c.unparen(size).elements)
            new_size = c.expr(f"(min({HELPER}(), {product}),)")
        else:
            new_size = c.expr(f"min({HELPER}(), {c.code(size)})")
        pairs = [(plan.kdef, new_kdef), (size, new_size)]
        if plan.passed:
            call = plan.launch.call
            if c.contains(call, cst.CSTNode, lambda n: n is size):  # an inline grid: the new size goes into the new call
                call = c.replace_all(call, [(size, new_size)])
                pairs = pairs[:1]
            for name, source in plan.passed:
                call = c.set_kwarg(call, name, c.expr(source))
            pairs.append((plan.launch.call, call))
        module = c.replace_all(module, pairs)
        module = c.insert_after_imports(module, _HELPER_SOURCE)
        return c.finish(text, module, f"{kernel.name} made persistent: one program per SM walks its tiles"
                        + (" (flatten=True: pipelined across tiles)" if flatten else ""))


def _tile_axis(tile: str, factors: list[str], axis: int) -> str:
    """The program id of ``axis`` for tile ``tile`` of a grid of ``factors`` programs per axis, axis 0 fastest:
    ``tile % A``, ``tile // A % B`` (a middle axis), ``tile // (A * B)`` (the last)."""
    before = " * ".join(factors[:axis])
    quotient = tile if axis == 0 else f"{tile} // {before if axis == 1 else f'({before})'}"
    return quotient if axis == len(factors) - 1 else f"{quotient} % {factors[axis]}"


def _atom(source: str) -> str:
    """``source`` as a factor of a product: parenthesised unless a name, a number, a call or a subscript."""
    node = c.expr(source)
    return source if isinstance(node, cst.Name | cst.Integer | cst.Call | cst.Subscript | cst.Attribute) else f"({source})"


ACTION = Persistent()
