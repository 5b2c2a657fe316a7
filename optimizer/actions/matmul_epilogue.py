"""Matmul epilogue: a following elementwise kernel over a kernel's output runs in that kernel's store.

``linear_kernel`` writes ``h`` tile by tile (any indexing: a ``tl.dot`` matmul, a 2-D kernel), then a
1-D kernel maps ``out[i] = f(h[i])`` over all of ``h`` (GELU, bias-free activations, scaling). The
producer now stores ``f`` of its value, cast first to ``h``'s element type (what storing and
reloading it did), into ``h``; the second launch and ``out``'s allocation go, and the host reads
``h`` where it read ``out``. ``f`` may also read a per-column input (a bias: ``tl.load(b_ptr + offs %
N)`` with ``N`` the row length of a fresh row-major ``h``), loaded in the producer at its column
offsets as one row that broadcasts over the tile (masked by the store mask's column conditions, e.g.
``rn[None, :] < N``: a [1, BLOCK_N] read, not a [BLOCK_M, BLOCK_N] one), through a parameter it already has for
that tensor or a new one.
Offered when ``f`` reads nothing else (no index, no other input) and the consumer covers every element of
``h`` once, which the kernel model (analysis/kernel_model.py) reads from its indices and masks, however spelled:
one flat block per program (``program_id(0) * B + arange`` masked by ``< h.numel()``, the bias at ``offs % N``), or a
row per program on one grid axis and ``cdiv(N, B)`` column blocks on the other (``row * N + cols`` masked by
``cols < N``, the bias at ``cols``),
``out`` is allocated like ``h``, nothing reads ``h`` after the second launch, and the statements
between the launches only look at ``h``'s shape. The consumer's definition goes once nothing in
the file names it.

Example: kernel=linear_kernel target=h100 params={"consumer": "gelu_kernel"}

```python before
@triton.jit
def linear_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        w = tl.load(w_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, w)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476)), mask=offs < n)


def linear_gelu(x, w):
    M, K = x.shape
    N = w.shape[1]
    h = torch.empty((M, N), device=x.device, dtype=torch.float32)
    linear_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](x, w, h, M, N, K, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    out = torch.empty_like(h)
    gelu_kernel[(triton.cdiv(h.numel(), 1024),)](h, out, h.numel(), BLOCK=1024)
    return out
```

```python after
@triton.jit
def linear_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        w = tl.load(w_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, w)
    x_epi = (acc).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], 0.5 * x_epi * (1.0 + tl.erf(x_epi * 0.7071067811865476)), mask=(rm[:, None] < M) & (rn[None, :] < N))


def linear_gelu(x, w):
    M, K = x.shape
    N = w.shape[1]
    h = torch.empty((M, N), device=x.device, dtype=torch.float32)
    linear_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](x, w, h, M, N, K, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    return h
```
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

import libcst as cst
import sympy as sp

from ..analysis import FileAnalysis, Kernel
from ..analysis.kernel_model import Access, KernelModel, kernel_model
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from ._consumer_fusion import ConsumerFusion, consumer_param
from .base import ActionError, Edit
from .epilogue import _metadata_reads
from .fusion import (
    _ALLOCATORS,
    Fusion,
    _ALWAYS_FREE,
    _assign_of,
    _call_of,
    _drop_consumer,
    _impure_calls,
    _load_parts,
    _normal_form,
    _store_parts,
    bound_once,
)


@dataclass
class _Plan:
    consumer: Kernel
    store: cst.SimpleStatementLine  # the producer's only store (last statement)
    value: cst.BaseExpression  # what it stores
    dest: str  # the name whose ``.dtype.element_ty`` is the buffer's element type
    statements: list[cst.BaseStatement]  # the consumer's loaded value and its computation, in fresh names
    c_value: cst.BaseExpression
    buffer: str
    out: str
    removed: list[cst.SimpleStatementLine]  # host statements that go: the consumer launch, out's allocation
    rename_from: int  # host statements from this index on read ``buffer`` where they read ``out``
    target: str  # the producer's name for the value the consumer loaded
    new_params: list = None  # (producer's new pointer param, host tensor) for per-column inputs
    insert_at: int = 0  # where they go in the producer's signature and launch


def _store_value_and_dest(statement: cst.CSTNode) -> tuple[cst.Call, cst.BaseExpression, str] | None:
    """``tl.store(PTR, VALUE, ...)`` -> (call, VALUE, name for the element type) for ``P + offs`` or a pointer name."""
    call = _call_of(statement)
    if call is None or c.code(call.func) != "tl.store" or len(call.args) < 2 or call.args[0].keyword or call.args[1].keyword:
        return None
    ptr = call.args[0].value
    while isinstance(ptr, cst.BinaryOperation) and isinstance(ptr.operator, cst.Add):
        ptr = ptr.left  # ``y_ptr + rm[:, None] * N + rn[None, :]``: the base is the leftmost term
    return (call, call.args[1].value, ptr.value) if isinstance(ptr, cst.Name) else None


class MatmulEpilogue(ConsumerFusion):
    name = "matmul_epilogue"

    def _pairs(self, analysis: FileAnalysis, kernel: Kernel) -> list[str]:
        """Kernels launched after ``kernel`` in the same host function (the consumers to try)."""
        out = []
        for site in analysis.launches_of(kernel.name):
            later = [s for s in analysis.launches if s.host_function == site.host_function and s.host_function is not None
                     and s.span.start_offset > site.span.start_offset]
            if later and later[0].kernel != kernel.name:
                out.append(later[0].kernel)
        return out

    def _plan(self, module: cst.Module, analysis: FileAnalysis, producer: Kernel, consumer_name: str) -> _Plan:
        consumer = analysis.kernel(consumer_name)
        if consumer is None or consumer.name == producer.name:
            raise ActionError(f"no kernel {consumer_name}")
        try:
            Fusion()._plan(module, analysis, producer.name, consumer_name)
        except ActionError:
            pass
        else:  # two 1-D elementwise kernels: fusion offers the same fold; one step, one verification
            raise ActionError(f"fusion folds {consumer_name} into {producer.name}")
        for k in (producer, consumer):
            if len(analysis.launches_of(k.name)) != 1:
                raise ActionError(f"{k.name} is launched more than once")
        if len(producer.calls_of("store")) != 1 or producer.calls_of("make_block_ptr", "make_tensor_descriptor", *(
                "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg")):
            raise ActionError(f"{producer.name} does not write through one plain store")
        shape = kernel_model(analysis, consumer)
        if consumer.is_autotuned or shape.loops or shape.reductions or len(shape.program_ids) > 2:
            raise ActionError(f"{consumer.name} is not an elementwise kernel (a loop, a reduction or a third grid axis)")
        pdef, (p_launch,) = c.locate(module, producer.name)
        cdef, (c_launch,) = c.locate(module, consumer.name)
        host = p_launch.host
        if host is None or host is not c_launch.host:
            raise ActionError("the two launches are not in the same host function")
        p_store = _only_store_line(pdef)
        parts = _store_value_and_dest(p_store) if p_store is not None else None
        if parts is None:
            raise ActionError(f"{producer.name}'s only store is not a statement of its own")
        _call, value, dest = parts
        if producer.param(dest) is not None and producer.param(dest).kind != "pointer":
            raise ActionError(f"{producer.name}'s store does not start from its output pointer")
        if any(c.count_name(call, dest) for call in c.calls_in(pdef.body) if c.code(call.func) == "tl.load"):
            # a store in a loop that reloads what it stored would read the fused values
            raise ActionError(f"{producer.name} reads back the buffer it stores")
        # The consumer: out[i] = f(buffer[i]) over the whole buffer.
        taken = c.names_in(pdef) | c.names_in(cdef)
        index, loads, compute, store = _normal_form(list(cdef.body.body), taken)
        c_dest, c_offs, c_value, c_mask = _store_parts(store)
        c_sources = c.launch_sources(c_launch, consumer)
        p_sources_all = c.launch_sources(p_launch, producer)
        written = {p_sources_all[dest]} if dest in p_sources_all else set(p_sources_all.values())  # what the store writes
        from_buffer = [l for l in loads if c_sources.get(_load_parts(l)[1]) in written]
        if len(from_buffer) != 1:
            raise ActionError(f"{consumer.name} does not read {producer.name}'s output exactly once")
        target, src, offs, mask = _load_parts(from_buffer[0])
        columns = [l for l in loads if l is not from_buffer[0]]  # per-column inputs (a bias), checked below
        # Which elements the consumer reads and writes is a question to the kernel model, whatever the spelling:
        # one flat block per program, or a row per program along one grid axis and column blocks along the other.
        model = kernel_model(analysis, consumer)
        read, written_at = _only_access(model.loads(), src), _only_access(model.stores(), c_dest)
        if read is None or written_at is None or read.offset is None:
            raise ActionError(f"{consumer.name} does not read {src} and write {c_dest} once each at an index it computes")
        if written_at.offset != read.offset or written_at.bounds != read.bounds:
            raise ActionError(f"{consumer.name} stores elsewhere than it loads")
        buffer = c_sources.get(src, "")
        out = c_sources.get(c_dest, "")
        if not buffer.isidentifier() or not out.isidentifier():
            raise ActionError(f"{consumer.name} reads and writes host expressions, not named tensors")
        # A per-column input (a bias, N the buffer's row length) is the producer's column offsets in a contiguous
        # buffer: loaded there with the store's mask.
        row_length = _row_length_sources(host, buffer)
        is_column = _buffer_columns(model, read, c_sources, host, buffer, row_length,
                                    analysis.launches_of(consumer.name)[0], consumer.name)
        col_term, store_mask = _column_term(producer, pdef, p_store, p_sources_all, buffer, row_length)
        extra_loads = []
        for load in columns:
            e_ptr = _load_parts(load)[1]
            access = _only_access(model.loads(), e_ptr)
            if access is None or access.offset is None or not is_column(access.offset) or col_term is None \
                    or access.bounds != read.bounds:
                raise ActionError(f"{consumer.name} reads {e_ptr} other than once per column of the buffer")
            if not c_sources.get(e_ptr, "").isidentifier():
                raise ActionError(f"{consumer.name}'s input {e_ptr} is not a plain host tensor")
            alloc_value = getattr(c.host_assignment(host, buffer), "value", None)
            if not (isinstance(alloc_value, cst.Call) and c.code(alloc_value.func) in ("torch.empty", "torch.zeros")):
                raise ActionError(f"{buffer} is not a fresh row-major torch.empty/zeros((rows, cols)) buffer")
            extra_loads.append(load)
        free = set().union(*[c.names_in(_assign_of(s)[1]) for s in compute]) | c.names_in(c_value) if compute else c.names_in(c_value)
        local = {target} | {_assign_of(s)[0] for s in compute} | {_load_parts(l)[0] for l in extra_loads}
        # ``out.to(out_ptr.dtype.element_ty)``: the output's element type is the buffer's (out is allocated like it).
        value_code = "".join(c.code(x) for x in [*compute, c_value])
        dtype_only = c_dest in free and value_code.count(f"{c_dest}.dtype") == sum(c.count_name(x, c_dest) for x in [*compute, c_value])
        if dtype_only:
            free = free - {c_dest}
        if not free <= local | _ALWAYS_FREE:
            raise ActionError(f"{consumer.name}'s value reads {', '.join(sorted(free - local - _ALWAYS_FREE))}, not only the loaded value")
        # The producer writes the buffer, which is a fresh allocation that ``out`` copies.
        p_sources = c.launch_sources(p_launch, producer)
        if sorted(p_sources.values()).count(buffer) != 1 or p_sources.get(dest) not in (buffer, None):
            raise ActionError(f"{producer.name} does not get {buffer} once, as the pointer it stores to")
        body = list(host.body.body)
        pi = next((i for i, s in enumerate(body) if _call_of(s) is p_launch.call), None)
        ci = next((i for i, s in enumerate(body) if _call_of(s) is c_launch.call), None)
        if pi is None or ci is None or ci < pi:
            raise ActionError("the launches are not top-level statements of the host function, in order")
        alloc = c.host_assignment(host, buffer)
        out_alloc = c.host_assignment(host, out)
        if alloc is None or not (isinstance(alloc.value, cst.Call) and c.code(alloc.value.func) in _ALLOCATORS):
            raise ActionError(f"{buffer} is not a fresh torch.empty/zeros allocation")
        like = f"torch.empty_like({buffer})"
        if out_alloc is None or "".join(c.code(out_alloc.value).split()) not in (like, "".join(c.code(alloc.value).split())):
            raise ActionError(f"{out} is not allocated like {buffer}")
        out_line = c.statement_holding(host, out_alloc)
        between = body[pi + 1:ci]
        for s in between:
            if s is out_line:
                continue
            if _assign_of(s) is None or _impure_calls(s):
                raise ActionError("something other than shape arithmetic runs between the launches")
            if c.count_name(s, buffer) != _metadata_reads(s, buffer) + c.code(s).count(like):
                raise ActionError(f"a statement between the launches reads {buffer}'s values")
        if out_line not in body or body.index(out_line) > ci or c.count_name(host, out) != 1 + c.count_name(c_launch.call, out) + \
                sum(c.count_name(s, out) for s in body[ci + 1:]):
            raise ActionError(f"{out} is used before the second launch")
        # Shape arithmetic only the second launch read (``n = h.numel()``) goes with it.
        # (``n = h.numel()`` and a grid lambda that reads it are both dead once the launch goes.)
        dead: list = []
        while True:
            more = [s for s in between if s is not out_line and s not in dead and
                    c.count_name(host, _assign_of(s)[0]) == 1 + c.count_name(c_launch.call, _assign_of(s)[0])
                    + sum(c.count_name(d, _assign_of(s)[0]) for d in dead)]
            if not more:
                break
            dead += more
        if any(c.count_name(s, buffer) for s in body[ci + 1:]):
            raise ActionError(f"{buffer} is read after the second launch (it would hold the fused values)")
        # The consumer's names, made fresh where the producer already uses them.
        mapping = {c_dest: dest} if dtype_only else {}
        for name in sorted(local):
            fresh = name if name not in c.names_in(pdef) else next(
                n for n in (f"{name}_epi", *(f"{name}_epi{i}" for i in range(2, 99))) if n not in taken)
            taken.add(fresh)
            mapping[name] = fresh
        # An input the producer already gets from the same host tensor is read through its own parameter.
        twins = {}
        for st in extra_loads:
            e_ptr = _load_parts(st)[1]
            twin = next((name for name, source in p_sources_all.items()
                         if source == c_sources.get(e_ptr) and (pp := producer.param(name)) is not None and pp.kind != "constexpr"), None)
            if twin is not None:
                twins[id(st)] = twin
        fresh = [st for st in extra_loads if id(st) not in twins]
        for st in fresh:  # the producer's launch stays where it is: what it newly reads must exist there
            source = c_sources.get(_load_parts(st)[1], "")
            if any(source in _written_names(b) for b in body[pi:]):
                raise ActionError(f"{source} is assigned after {producer.name}'s launch")
        extra, insert_at = Fusion._extra_params(pdef, cdef, p_launch, analysis.launches_of(consumer.name)[0], fresh, taken) \
            if fresh else ([], 0)
        pointer = {**twins, **{id(st): new for st, _ptr, new, _src in extra}}
        column_mask = _column_mask(store_mask, col_term, producer, _defined_once(pdef)) if extra_loads else ""
        column_loads = [c.stmt(f"{mapping[_load_parts(st)[0]]} = tl.load({pointer[id(st)]} + {col_term}, mask={column_mask}, other=0.0)\n")
                        for st in extra_loads]
        statements = column_loads + [c.substitute_names(s, mapping) for s in compute]
        return _Plan(consumer, p_store, value, dest, statements, c.substitute_names(c_value, mapping), buffer, out,
                     [body[ci], out_line, *dead], ci + 1, mapping[target], [(new, src) for _s, _p, new, src in extra], insert_at)

    def _title(self, plan: _Plan, kernel: Kernel, consumer: str) -> str:
        return f"Fuse {consumer} into {kernel.name}'s epilogue (drops {plan.out} and one pass over {plan.buffer})"

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        consumer = consumer_param(self.name, params)
        module = c.parse(text)
        plan = self._plan(module, analysis, kernel, consumer)
        target = plan.target
        cast = c.stmt(f"{target} = ({c.code(plan.value)}).to({plan.dest}.dtype.element_ty)\n").with_changes(
            leading_lines=plan.store.leading_lines)
        call = _call_of(plan.store)
        args = list(call.args)
        args[1] = args[1].with_changes(value=plan.c_value)
        new_store = plan.store.with_changes(leading_lines=[], body=[plan.store.body[0].with_changes(value=call.with_changes(args=args))])
        _kdef, (launch,) = c.locate(module, kernel.name)
        host = launch.host
        body = list(host.body.body)
        renamed = [c.substitute_names(s, {plan.out: plan.buffer}) for s in body[plan.rename_from:]]
        pairs: list = [(plan.store, cst.FlattenSentinel([cast, *plan.statements, new_store]))]
        if plan.new_params:
            at = plan.insert_at
            pdef, _ = c.locate(module, kernel.name)
            params_ = list(pdef.params.params)
            params_ = params_[:at] + [cst.Param(cst.Name(new)) for new, _src in plan.new_params] + params_[at:]
            pairs.append((pdef.params, pdef.params.with_changes(params=params_)))
            args = list(launch.call.args)
            args = args[:at] + [cst.Arg(cst.Name(src)) for _new, src in plan.new_params] + args[at:]
            pairs.append((launch.call, launch.call.with_changes(args=args)))
        pairs += [(old, new) for old, new in zip(body[plan.rename_from:], renamed) if new is not old]
        pairs += [(s, cst.RemovalSentinel.REMOVE) for s in plan.removed]
        module = c.replace_all(module, pairs)
        module, dropped = _drop_consumer(module, consumer)
        notes = [f"{consumer} is no longer launched here; the host reads {plan.buffer} where it read {plan.out}", dropped]
        return c.finish(text, module, f"fused {consumer} into {kernel.name}'s epilogue", notes)


def _only_access(accesses: list[Access], pointer: str) -> Access | None:
    """The one access through kernel parameter ``pointer`` (None when there are none or several)."""
    found = [a for a in accesses if a.tensor == pointer]
    return found[0] if len(found) == 1 else None


def _buffer_columns(model: KernelModel, read: Access, sources: dict[str, str], host: cst.FunctionDef, buffer: str,
                    row_length: set[str], launch, consumer: str):
    """Check that the consumer's launch covers every element of the row-major ``buffer`` exactly once, and return
    a test for an index that is the column of the element it reads: ``offs % N`` for one flat block per program
    (``pid * B + tl.arange(0, B)`` masked by ``< numel``), the column block itself for a row per program on one grid
    axis and ``cdiv(N, B)`` column blocks on the other (masked by ``cols < N``)."""
    index = read.offset
    terms = model.program_terms(index) if not read.indirect else {}
    params = {sym: name for name, sym in model.params.items()}

    def host_of(sym: sp.Expr) -> set[str]:
        """How the host spells what it passes for kernel parameter ``sym``: as written, and a name's value."""
        source = "".join(sources.get(params.get(sym, ""), "").split())
        assign = c.any_assignment(host, source) if source.isidentifier() else None  # ``n = h.numel()`` passed as ``n``
        return {source} | ({"".join(c.code(assign.value).split())} if assign is not None else set())

    def one_block(rest: sp.Expr, block: sp.Expr, pid: sp.Expr) -> bool:
        """``rest`` is ``block * pid + tl.arange(0, block)``."""
        lanes = rest - block * pid
        return lanes in model.aranges and model.aranges[lanes].start == 0 and model.aranges[lanes].size == block

    if len(terms) == 1 and len(model.program_ids) == 1:
        (pid, block), = terms.items()
        counts = _element_counts(host, buffer)
        if one_block(index, block, pid) and len(read.bounds or ()) == 1 and read.bounds[0][0] == index \
                and host_of(read.bounds[0][1]) & counts:
            lengths = [sym for sym in params if host_of(sym) & row_length]
            return lambda offset: any(offset == sp.Mod(index, n) for n in lengths)
        raise ActionError(f"{consumer} does not cover all of {buffer} with one masked block per program")
    if len(terms) == 2:
        grid = _grid_axes(launch)
        for (row, length), (col, block) in (tuple(terms.items()), tuple(terms.items())[::-1]):
            columns = index - length * row
            if not host_of(length) & row_length or not one_block(columns, block, col) or read.bounds != ((columns, length),):
                continue
            axes = {sym: axis for axis, sym in model.program_ids.items()}
            if grid is None or len(grid) != 2 or row not in axes or col not in axes:
                break
            rows_ok = grid[axes[row]] in _row_count_sources(host, buffer)
            block_sources = {params.get(block, ""), "".join(sources.get(params.get(block, ""), "").split())}
            cols_ok = any(grid[axes[col]] in (f"triton.cdiv({n},{b})", f"({n}+{b}-1)//{b}")
                          for n in row_length for b in block_sources if b)
            if rows_ok and cols_ok:
                return lambda offset: offset == columns
            break
    raise ActionError(f"{consumer} does not cover all of {buffer}: neither one flat block per program nor a row per "
                      "program with column blocks over the row")


def _grid_axes(launch) -> list[str] | None:
    """A launch's grid tuple, each axis whitespace-free (``META["BLOCK"]`` read as ``BLOCK``); None when not a tuple."""
    try:
        node = ast.parse(launch.grid_source, mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, ast.Lambda):
        node = node.body
    if not isinstance(node, ast.Tuple):
        return None
    flat = ["".join(ast.unparse(e).split()) for e in node.elts]
    return [re.sub(r"\w+\[['\"](\w+)['\"]\]", r"\1", axis) for axis in flat]


def _row_count_sources(host: cst.FunctionDef, buffer: str) -> set[str]:
    """Host expressions (whitespace-free) that count the rows of a fresh 2-D ``buffer``."""
    return {f"{buffer}.shape[0]", f"{buffer}.size(0)"} | _allocated_extent(host, buffer, 0)


def _allocated_extent(host: cst.FunctionDef, buffer: str, axis: int) -> set[str]:
    """The extent along ``axis`` (whitespace-free) that the host allocated a fresh 2-D ``buffer`` with, if it did."""
    alloc = c.host_assignment(host, buffer)
    if alloc is not None and isinstance(alloc.value, cst.Call) and alloc.value.args:
        shape = alloc.value.args[0].value
        if isinstance(shape, cst.Tuple | cst.List) and len(shape.elements) == 2:
            return {"".join(c.code(shape.elements[axis].value).split())}
    return set()


def _written_names(statement: cst.CSTNode) -> set[str]:
    single = _assign_of(statement)
    if single is not None:
        return {single[0]}
    if isinstance(statement, cst.SimpleStatementLine):
        return set().union(*[c.names_in(t.target) for b in statement.body if isinstance(b, cst.Assign) for t in b.targets] or [set()])
    return set()


def _column_term(producer: Kernel, kernel_def: cst.FunctionDef, store: cst.SimpleStatementLine, sources: dict[str, str],
                 buffer: str, row_length: set[str]) -> tuple[str | None, str]:
    """(column offsets, store mask) of ``tl.store(y + ROWS[:, None] * stride + COLS[None, :], v, mask=M)``.

    The offsets may be named first (FlagGems' ``out_off = rows * N + cols``, ``cols = pid * B + arange(B)[None, :]``):
    a name the kernel assigns once, at its top level, stands for its value. Only when ``stride`` is the buffer's
    ``.stride(0)`` as passed at the launch, or its row length (``row_length``: the buffer is a fresh row-major
    allocation, whose row stride that is), so a flat index ``i`` of the buffer is row ``i // N``, column ``COLS``;
    (None, "") otherwise.
    """
    call = _call_of(store)
    mask = c.kwarg(call, "mask") or (call.args[2] if len(call.args) > 2 and call.args[2].keyword is None else None)
    if mask is None:
        return None, ""
    defs = _defined_once(kernel_def)
    terms = c.summands(call.args[0].value)
    base = [t for t in terms if isinstance(t, cst.Name) and producer.param(t.value) is not None
            and producer.param(t.value).kind == "pointer"]
    if len(base) != 1:
        return None, ""
    if len(terms) == 2 and isinstance(offsets := terms[1 - terms.index(base[0])], cst.Name) and offsets.value in defs:
        terms = [base[0], *c.summands(defs[offsets.value])]  # ``out + out_off``: the offsets' own sum
    if len(terms) != 3:
        return None, ""
    terms = [t for t in terms if t is not base[0]]  # ROWS * stride and COLS remain
    unit = (f"{buffer}.stride(1)", f"{buffer}.stride(-1)")
    terms = [_without_unit_stride(t, producer, sources, unit) for t in terms]  # ``cols[None, :] * stride_yn``

    def row_vector(term: cst.BaseExpression) -> bool:
        spelled = defs.get(term.value, term) if isinstance(term, cst.Name) else term
        return c.flat(spelled).endswith("[None,:]")

    cols = [t for t in terms if row_vector(t)]
    rows = [t for t in terms if t not in cols]
    if len(cols) != 1 or len(rows) != 1 or not isinstance(rows[0], cst.BinaryOperation) or not isinstance(rows[0].operator, cst.Multiply):
        return None, ""
    stride = [f for f in (rows[0].left, rows[0].right) if isinstance(f, cst.Name) and producer.param(f.value) is not None]
    strides = {f"{buffer}.stride(0)", f"{buffer}.stride(-2)", *row_length}
    if len(stride) != 1 or sources.get(stride[0].value) not in strides:
        return None, ""
    return c.code(cols[0]), c.code(mask.value)


def _column_mask(store_mask: str, col_term: str, producer: Kernel, defs: dict[str, cst.BaseExpression]) -> str:
    """The store mask's column conditions alone, so a per-column input is read as one row that broadcasts.

    ``(rm[:, None] < M) & (rn[None, :] < N)`` gives ``rn[None, :] < N``: the bias is then one [1, BLOCK_N] load per
    tile instead of a [BLOCK_M, BLOCK_N] one (rows the store masks off are never written, so what they would have
    read does not matter). A mask with no condition on the columns alone stays whole.
    """
    node = c.unparen(cst.parse_expression(store_mask))
    if isinstance(node, cst.Name) and node.value in defs:  # ``out_mask = (rows < M) & (cols < N)``
        node = c.unparen(defs[node.value])
    columns = c.names_in(cst.parse_expression(col_term))

    def on_columns(term: cst.BaseExpression) -> bool:
        local = {n for n in c.names_in(term) if producer.param(n) is None}
        return bool(local) and local <= columns

    kept = [c.code(t) for t in c.conjuncts(node) if on_columns(t)]
    if not kept:
        return store_mask
    return kept[0] if len(kept) == 1 else " & ".join(f"({k})" for k in kept)


def _defined_once(kernel_def: cst.FunctionDef) -> dict[str, cst.BaseExpression]:
    """Names the kernel binds exactly once (``fusion.bound_once``), in a plain top-level ``name = value``, with that value."""
    once = bound_once(kernel_def)
    return {single[0]: single[1] for statement in kernel_def.body.body
            if (single := _assign_of(statement)) is not None and single[0] in once}


def _without_unit_stride(term: cst.BaseExpression, producer: Kernel, sources: dict[str, str], unit: tuple[str, ...]):
    """``X * s`` -> ``X`` when ``s`` is a parameter the launch passes the buffer's last stride for (1, row-major)."""
    if isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Multiply):
        for factor, other in ((term.right, term.left), (term.left, term.right)):
            if isinstance(factor, cst.Name) and producer.param(factor.value) is not None and sources.get(factor.value) in unit:
                return other
    return term


def _element_counts(host: cst.FunctionDef, buffer: str) -> set[str]:
    """Host expressions (whitespace-free) that count a fresh buffer's elements.

    ``h.numel()``; ``M*N`` and ``N*M`` for ``torch.empty((M, N), ...)``; ``x.numel()`` for
    ``torch.empty_like(x)`` (same shape, whatever dtype it is given).
    """
    out = {f"{buffer}.numel()"}
    alloc = c.host_assignment(host, buffer)
    if alloc is None or not isinstance(alloc.value, cst.Call) or not alloc.value.args or alloc.value.args[0].keyword:
        return out
    first = alloc.value.args[0].value
    if c.code(alloc.value.func) in ("torch.empty_like", "torch.zeros_like") and isinstance(first, cst.Name):
        out.add(f"{first.value}.numel()")
    if isinstance(first, cst.Tuple | cst.List) and len(first.elements) == 2:
        a, b = ("".join(c.code(e.value).split()) for e in first.elements)
        out |= {f"{a}*{b}", f"{b}*{a}"}
    return out


def _only_store_line(kernel_def: cst.FunctionDef) -> cst.SimpleStatementLine | None:
    """The statement line, at any depth (a row loop, a branch), that is the kernel's one ``tl.store(...)``."""
    found: list[cst.SimpleStatementLine] = []

    class V(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
            if any(isinstance(n, cst.Call) and c.code(n.func) == "tl.store" for n in c.calls_in(node)):
                found.append(node)
            return False

    kernel_def.body.visit(V())
    return found[0] if len(found) == 1 and _call_of(found[0]) is not None else None


def _row_length_sources(host: cst.FunctionDef, buffer: str) -> set[str]:
    """Host expressions (whitespace-free) that are the length of a row of a fresh 2-D ``buffer``."""
    out = {f"{buffer}.shape[1]", f"{buffer}.shape[-1]", f"{buffer}.size(1)", f"{buffer}.size(-1)"}
    out |= _allocated_extent(host, buffer, 1)
    names = {o for o in out if o.isidentifier()}
    for statement in host.body.body:  # ``N = h.shape[1]``: a host name for one of them
        single = _assign_of(statement)
        if single is not None and "".join(c.code(single[1]).split()) in out:
            out.add(single[0])
    return out | names


ACTION = MatmulEpilogue()
