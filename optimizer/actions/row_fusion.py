"""Row fusion: a kernel that stores per-row statistics and the kernel that reads them become one.

Softmax, RMS norm, layer norm and cross-entropy are often written as a statistics kernel (row max
and sum, mean square, mean and variance) that stores one value per row into small buffers, then a
kernel over the same rows that loads those values back. The statistics kernel now runs the second
kernel's body after its own, with each loaded statistic replaced by the value it stored (cast to the
buffer's element type, what storing and loading it did). The second launch goes; a statistics
buffer that nothing else reads goes too (its store, parameter, argument and allocation), while one
the host still uses (a layer norm's mean for backward) keeps its store. The second kernel's other
inputs become new parameters; parameters both kernels get from the same host value are shared.
A fused multi-pass kernel is then a candidate for ``single_pass`` (one read of the row).

Example: kernel=rms_kernel target=h100 params={"consumer": "rms_scale_kernel"}

```python before
@triton.jit
def rms_kernel(x_ptr, rstd_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    squares = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        squares += tl.sum(x * x, axis=0)
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(squares / n_cols + eps))


@triton.jit
def rms_scale_kernel(x_ptr, rstd_ptr, w_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    rstd = tl.load(rstd_ptr + row)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        w = tl.load(w_ptr + cols, mask=cols < n_cols)
        tl.store(out_ptr + row * n_cols + cols, x * rstd * w, mask=cols < n_cols)


def rms_norm(x, weight):
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    rstd = torch.empty(n_rows, device=x.device, dtype=torch.float32)
    rms_kernel[(n_rows,)](x, rstd, n_cols, 1e-6, BLOCK=128)
    rms_scale_kernel[(n_rows,)](x, rstd, weight, out, n_cols, BLOCK=128)
    return out
```

```python after
@triton.jit
def rms_kernel(x_ptr, n_cols, eps, w_ptr, out_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    squares = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        squares += tl.sum(x * x, axis=0)
    row = tl.program_id(0)
    rstd = (1.0 / tl.sqrt(squares / n_cols + eps)).to(tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        w = tl.load(w_ptr + cols, mask=cols < n_cols)
        tl.store(out_ptr + row * n_cols + cols, x * rstd * w, mask=cols < n_cols)


def rms_norm(x, weight):
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    rms_kernel[(n_rows,)](x, n_cols, 1e-6, weight, out, BLOCK=128)
    return out
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.kernel_model import kernel_model
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from ._consumer_fusion import ConsumerFusion, consumer_param
from .base import ActionError, Edit
from .fusion import _assign_of, _call_of, _drop_consumer, _only_access, _returns, _top_statement

_TORCH_TO_TL = {"float32": "tl.float32", "float": "tl.float32", "float16": "tl.float16", "half": "tl.float16",
                "bfloat16": "tl.bfloat16", "float64": "tl.float64", "double": "tl.float64"}


@dataclass
class _Stat:
    """One statistic: the producer stores ``value`` at ``buffer_param + row``; the consumer loads it back."""

    store: cst.SimpleStatementLine
    value: cst.BaseExpression
    p_param: str
    load: cst.Call  # ``tl.load(P + row)``, as a statement's value or inside an expression
    statement: cst.BaseStatement  # the consumer's top-level statement that holds it (a loop too)
    buffer: str  # host name
    cast: str  # element type expression for ``.to(...)``
    drop: bool  # the buffer is private: store, parameter, argument and allocation go


@dataclass
class _Plan:
    stats: list[_Stat]
    p_launch: c.LaunchNode
    c_launch: c.LaunchNode
    rename: dict[str, str]  # consumer parameter -> producer parameter
    new_params: list[tuple[str, str]] = field(default_factory=list)  # (producer's new param, host source)


def _stat_store(statement: cst.CSTNode) -> tuple[str, str, cst.BaseExpression] | None:
    """``tl.store(P + IDX, VALUE)`` -> (P, IDX, VALUE)."""
    call = _call_of(statement)
    if call is None or c.code(call.func) != "tl.store" or len(call.args) != 2 or any(a.keyword for a in call.args):
        return None
    ptr = call.args[0].value
    if isinstance(ptr, cst.BinaryOperation) and isinstance(ptr.operator, cst.Add) and isinstance(ptr.left, cst.Name):
        return ptr.left.value, c.code(ptr.right), call.args[1].value
    return None


def _stat_loads(statement: cst.CSTNode) -> list[tuple[cst.Call, str, str]]:
    """Every ``tl.load(P + IDX)`` (no mask) in a statement, loops included -> (call, P, IDX)."""
    found: list[tuple[cst.Call, str, str]] = []

    class V(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            if c.code(call.func) != "tl.load" or len(call.args) != 1 or call.args[0].keyword:
                return
            ptr = call.args[0].value
            if isinstance(ptr, cst.BinaryOperation) and isinstance(ptr.operator, cst.Add) and isinstance(ptr.left, cst.Name):
                found.append((call, ptr.left.value, c.code(ptr.right)))

    statement.visit(V())
    return found


def _stat_param(stat: _Stat) -> str:
    return stat.load.args[0].value.left.value  # type: ignore[union-attr]


def _same_cast(statement: cst.CSTNode, cast: str) -> bool:
    """``v = (v).to(CAST)``: re-casting to the buffer's type keeps what was stored."""
    single = _assign_of(statement)
    if single is None:
        return False
    name, value = single
    return "".join(c.code(value).split()) == f"({name}).to({''.join(cast.split())})"


class RowFusion(ConsumerFusion):
    name = "row_fusion"

    def _pairs(self, analysis: FileAnalysis, kernel: Kernel) -> list[str]:
        out = []
        for host in analysis.host_functions:
            sites = [s for s in analysis.launches if s.host_function == host.name]
            for first, second in zip(sites, sites[1:]):
                if first.kernel == kernel.name and second.kernel != kernel.name:
                    out.append(second.kernel)
        return out

    def _plan(self, module: cst.Module, analysis: FileAnalysis, producer: Kernel, consumer_name: str) -> _Plan:
        consumer = analysis.kernel(consumer_name)
        if consumer is None or consumer.name == producer.name:
            raise ActionError(f"no kernel {consumer_name}")
        for k in (producer, consumer):
            if k.is_autotuned or k.heuristics or len(analysis.launches_of(k.name)) != 1 or k.calls_of("dot"):
                raise ActionError(f"{k.name} is autotuned, launched more than once or a matmul")
        pdef, (p_launch,) = c.locate(module, producer.name)
        cdef, (c_launch,) = c.locate(module, consumer.name)
        host = p_launch.host
        if host is None or host is not c_launch.host:
            raise ActionError("the two launches are not in the same host function")
        pi, ci = _top_statement(host, p_launch.call), _top_statement(host, c_launch.call)
        if pi is None or ci != pi + 1:
            raise ActionError(f"{consumer.name} is not launched right after {producer.name}")
        if c.code(p_launch.call.func.slice[0].slice) != c.code(c_launch.call.func.slice[0].slice):  # type: ignore[union-attr]
            raise ActionError("the launches use different grids")
        if any(a.star for a in (*p_launch.call.args, *c_launch.call.args)):
            raise ActionError("a launch passes *args")
        p_body = [s for s in pdef.body.body if not c.is_docstring(s)]
        c_body = [s for s in cdef.body.body if not c.is_docstring(s)]
        if _returns(pdef):
            raise ActionError(f"{producer.name} returns early: the appended code would not run for those programs")
        stores = [st for st in p_body if _stat_store(st)]
        if not stores or len(producer.calls_of("store")) != len(stores):
            raise ActionError(f"{producer.name} does not store only one value per row, at its top level")
        p_sources = c.launch_sources(p_launch, producer)
        c_sources = c.launch_sources(c_launch, consumer)
        pm, cm = kernel_model(analysis, producer), kernel_model(analysis, consumer)

        def row_index(model, access):
            """Where the access is, over what the launch passes (the same row of the same buffer compares equal)."""
            return None if access is None or access.indirect else model.in_host_terms(access.offset)
        stats: list[_Stat] = []
        for store in stores:
            p_param, _index, value = _stat_store(store)
            buffer = p_sources.get(p_param, "")
            loads = [(st, hit) for st in c_body for hit in _stat_loads(st) if c_sources.get(hit[1]) == buffer]
            if not buffer.isidentifier() or len(loads) != 1:
                raise ActionError(f"{consumer.name} does not load {producer.name}'s {p_param} exactly once")
            statement, (call, c_param, _index) = loads[0]
            stored_at = row_index(pm, _only_access(pm.stores(), p_param))
            if c.count_name(cdef, c_param) != 2 or stored_at is None or stored_at != row_index(cm, _only_access(cm.loads(), c_param)):
                raise ActionError(f"{consumer.name} reads {c_param} elsewhere or at another row")
            alloc = c.any_assignment(host, buffer)
            private = c.count_name(host, buffer) == 1 + c.count_name(p_launch.call, buffer) + c.count_name(c_launch.call, buffer)
            dtype = re.search(r"dtype\s*=\s*torch\.(\w+)", c.code(alloc.value)) if alloc is not None else None
            alloc_ok = alloc is not None and isinstance(alloc.value, cst.Call) and c.code(alloc.value.func) in ("torch.empty", "torch.zeros")
            known = alloc_ok and dtype is not None and dtype.group(1) in _TORCH_TO_TL
            cast = _TORCH_TO_TL[dtype.group(1)] if known else f"{p_param}.dtype.element_ty"
            # What the store read must still hold after the producer's code: later statements may only
            # re-cast it the same way (an earlier row_fusion's copy), nothing else may write it.
            after = p_body[p_body.index(store) + 1:]
            for later in after:
                written = c.bound_names([later]) & c.names_in(value)
                if written and not _same_cast(later, cast):
                    raise ActionError(f"{producer.name} changes {', '.join(sorted(written))} after storing it")
            stats.append(_Stat(store, value, p_param, call, statement, buffer, cast, private and known))
        stat_params = {_stat_param(st) for st in stats}
        # Consumer parameters: shared when the host passes the same value, else new producer parameters.
        rename: dict[str, str] = {}
        new_params: list[tuple[str, str]] = []
        taken = c.names_in(pdef) | c.names_in(cdef)
        c_locals = c.bound_names(c_body)
        for p in consumer.params:
            if p.name in stat_params:
                continue
            source = c_sources.get(p.name)
            if source is None:
                raise ActionError(f"the launch of {consumer.name} does not pass {p.name}")
            twin = next((name for name, s in p_sources.items() if s == source), None)
            if twin is not None:
                rename[p.name] = twin
            elif p.kind == "constexpr":
                raise ActionError(f"{consumer.name}'s constexpr {p.name} has no twin in {producer.name}")
            else:
                fresh = p.name if p.name not in c.names_in(pdef) else next(
                    n for n in (f"{consumer.name}_{p.name}", *(f"{p.name}_{i}" for i in range(2, 99))) if n not in taken)
                taken.add(fresh)
                rename[p.name] = fresh
                new_params.append((fresh, source))
        if set(rename.values()) & (c_locals - set(rename)):
            raise ActionError(f"{consumer.name} assigns a name the producer's parameters use")
        if set(rename.values()) & c.bound_names(p_body):
            raise ActionError(f"{producer.name} changes a parameter the consumer's code would read (``x_ptr += ...``)")
        # The statistics' values must still hold where the consumer's loads were.
        for stat in stats:
            at = c_body.index(stat.statement)  # a loop that loads it may overwrite it in an earlier iteration
            before = c_body[:at + (not isinstance(stat.statement, cst.SimpleStatementLine))]
            if c.bound_names(before) & c.names_in(stat.value):
                raise ActionError(f"{consumer.name} overwrites what {producer.name}'s statistic reads before using it")
        return _Plan(stats, p_launch, c_launch, rename, new_params)

    def _title(self, plan: _Plan, kernel: Kernel, consumer: str) -> str:
        names = ", ".join(s.buffer for s in plan.stats)
        return f"Fuse {consumer} into {kernel.name}: one kernel per row, {names} stay in registers"

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        consumer = consumer_param(self.name, params)
        module = c.parse(text)
        plan = self._plan(module, analysis, kernel, consumer)
        pdef, _ = c.locate(module, kernel.name)
        cdef, _ = c.locate(module, consumer)
        # Each loaded statistic becomes the value the producer stored, cast like the buffer did.
        # (Placeholders first, filled in the renaming's pass: a pass never renames what it puts in, so
        # renaming the consumer's names never touches the producer's value.)
        holders = {f"__mtmc_stat{i}__": c.expr(f"({c.code(s.value)}).to({s.cast})") for i, s in enumerate(plan.stats)}
        loads = [(s.load, cst.Name(f"__mtmc_stat{i}__")) for i, s in enumerate(plan.stats)]
        tail = [c.substitute_names(c.replace_all(st, loads), {**plan.rename, **holders}) for st in cdef.body.body if not c.is_docstring(st)]
        dropped = {id(s.store) for s in plan.stats if s.drop}
        body = [s for s in pdef.body.body if id(s) not in dropped] + tail
        # Signature: dropped statistic parameters go; the consumer's new inputs come before the first
        # parameter the producer's launch passes by keyword (or has a default), in the launch too.
        drop_params = {s.p_param for s in plan.stats if s.drop}
        params_ = [p for p in pdef.params.params if p.name.value not in drop_params]
        call = plan.p_launch.call
        args = [a for a in call.args if c.arg_param(a, call, kernel) not in drop_params]
        at = next((i for i, p in enumerate(params_) if p.default is not None or
                   any(a.keyword is not None and a.keyword.value == p.name.value for a in args)), len(params_))
        positional = [a for a in args if a.keyword is None]
        if len(positional) < at:
            raise ActionError(f"{kernel.name}'s launch passes fewer positional arguments than the new parameters need")
        params_ = params_[:at] + [cst.Param(cst.Name(n)) for n, _src in plan.new_params] + params_[at:]
        new_args = [cst.Arg(c.expr(src)) for _n, src in plan.new_params]
        args = args[:at] + new_args + args[at:]
        if args and call.args:
            args = [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for a in args[:-1]] + \
                [args[-1].with_changes(comma=call.args[-1].comma)]
        new_def = pdef.with_changes(params=pdef.params.with_changes(params=params_), body=pdef.body.with_changes(body=body))
        host = plan.p_launch.host
        c_line = next(s for s in host.body.body if _call_of(s) is plan.c_launch.call)
        pairs: list = [(pdef, new_def), (call, call.with_changes(args=args)), (c_line, cst.RemovalSentinel.REMOVE)]
        for stat in plan.stats:
            if stat.drop:
                line = c.statement_holding(host, c.any_assignment(host, stat.buffer))
                if line is not None and len(line.body) == 1:
                    pairs.append((line, cst.RemovalSentinel.REMOVE))
        module = c.replace_all(module, pairs)
        module, dropped = _drop_consumer(module, consumer)
        notes = [f"{consumer} is no longer launched here", dropped]
        kept = [s.buffer for s in plan.stats if not s.drop]
        if kept:
            notes.append(f"{', '.join(kept)} still stored: the host reads it after the launches")
        return c.finish(text, module, f"fused {consumer} into {kernel.name} (row statistics stay in registers)", notes)


ACTION = RowFusion()
