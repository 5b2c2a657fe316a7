"""Prologue fusion: an elementwise kernel whose output the next kernel loads is computed inside that load.

A flat elementwise kernel writes ``buf[i] = f(a[g(i)], b[h(i)], ...)`` for ``i = program_id(0) * BLOCK +
arange(BLOCK)``, and the kernel launched right after it reads ``buf`` through one ``tl.load(buf_ptr + O,
mask=M, other=X)``, whatever its indexing: a matmul's weight tile, a row of a softmax, a gather. The
consumer now loads ``a`` and ``b`` at ``g(O)`` and ``h(O)`` (masked by ``M``), computes ``f`` there, casts it to
``buf``'s element type (what storing it did, so the numbers are the same) and keeps ``X`` where ``M`` is false;
the producer's launch, ``buf``'s allocation and its pointer parameter go. Dequantising a weight before a matmul,
scaling or activating an input before a reduction are the usual cases: one pass over ``buf`` and one launch fewer,
at the price of computing ``f`` once per load (a matmul loads each weight element once per row block). The
speed check decides whether that pays.

Offered when both kernels are launched once, one after the other in the same host function (only shape
arithmetic and allocations between them, none rebinding what the producer reads), the producer has no loop
and one store at its named offsets with a mask ``offsets < n``, its loads' addresses depend only on the
offsets and its scalar parameters, ``buf`` is a fresh allocation whose values nothing else reads and whose
element type the host spells (a torch dtype, or ``empty_like``/``.dtype`` of a tensor the kernels get), and the
consumer names ``buf``'s pointer in that one load only. The producer's tensors and scalars become new
parameters of the consumer (one it already gets from the same host expression is reused), passed by keyword.
The producer's definition goes when nothing else refers to it.

Example: kernel=dequant_kernel target=h100 params={"consumer": "matvec_kernel"}

```python before
@triton.jit
def dequant_kernel(q_ptr, s_ptr, w_ptr, K, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    q = tl.load(q_ptr + offs, mask=mask, other=0).to(tl.float32)
    s = tl.load(s_ptr + offs // K, mask=mask, other=0.0)
    tl.store(w_ptr + offs, q * s, mask=mask)


@triton.jit
def matvec_kernel(w_ptr, x_ptr, y_ptr, N, K, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        cols = k + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + row * K + cols, mask=cols < K, other=0.0)
        acc += w * tl.load(x_ptr + cols, mask=cols < K, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


def int8_matvec(qweight, scale, x):
    N, K = qweight.shape
    w = torch.empty((N, K), device=x.device, dtype=torch.float32)
    dequant_kernel[(triton.cdiv(N * K, 1024),)](qweight, scale, w, K, N * K, BLOCK=1024)
    y = torch.empty(N, device=x.device, dtype=torch.float32)
    matvec_kernel[(N,)](w, x, y, N, K, BLOCK_K=256)
    return y
```

```python after
@triton.jit
def matvec_kernel(x_ptr, y_ptr, N, K, q_ptr, s_ptr, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        cols = k + tl.arange(0, BLOCK_K)
        q_val = tl.load(q_ptr + (row * K + cols), mask=cols < K, other=0)
        s = tl.load(s_ptr + (row * K + cols) // K, mask=cols < K, other=0.0)
        q = q_val.to(tl.float32)
        w = tl.where(cols < K, (q * s).to(tl.float32), 0.0)
        acc += w * tl.load(x_ptr + cols, mask=cols < K, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


def int8_matvec(qweight, scale, x):
    N, K = qweight.shape
    y = torch.empty(N, device=x.device, dtype=torch.float32)
    matvec_kernel[(N,)](x, y, N, K, BLOCK_K=256, q_ptr=qweight, s_ptr=scale)
    return y
```
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.kernel_model import kernel_model
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit
from .epilogue import _metadata_reads
from .fusion import (
    _ALLOCATORS,
    Fusion,
    _ALWAYS_FREE,
    _assign_of,
    _base_and_offsets,
    _call_of,
    _dead_with,
    _drop_consumer,
    _impure_calls,
    _load_parts,
    _normal_form,
    _store_parts,
)

_TORCH_TO_TL = {f"torch.{t}": f"tl.{t}" for t in ("float32", "float16", "bfloat16", "float64", "int8", "uint8",
                                                  "int16", "int32", "int64")}
_TORCH_TO_TL.update({"torch.float": "tl.float32", "torch.half": "tl.float16", "torch.int": "tl.int32",
                     "torch.long": "tl.int64", "torch.double": "tl.float64"})


@dataclass
class _Plan:
    statements: list[cst.BaseStatement]  # the producer's loads and computation, in the consumer's names
    value: cst.BaseExpression  # what replaces the consumer's load of the buffer
    load: cst.Call  # that load
    holder: cst.SimpleStatementLine  # the consumer statement holding it
    buffer: str  # host name of the intermediate
    buffer_param: str  # the consumer's pointer parameter for it
    new_params: list[tuple[str, str]]  # (consumer's new parameter, host source)
    insert_at: int  # where they go in the consumer's signature
    p_statement: cst.BaseStatement  # the producer's launch
    alloc_statement: cst.BaseStatement | None  # the buffer's allocation, when nothing else names the buffer
    dead: list[cst.BaseStatement]  # shape arithmetic only the producer's launch read (``n = N * K``)


def _find_buffer_loads(cdef: cst.FunctionDef, param: str) -> list[cst.Call]:
    """``tl.load(param + O, ...)`` calls in the consumer."""
    found: list[cst.Call] = []

    class V(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if c.code(node.func) == "tl.load" and node.args and node.args[0].keyword is None:
                based = _base_and_offsets(node.args[0].value)
                if based is not None and based[0] == param:
                    found.append(node)

    cdef.visit(V())
    return found


def _arg(call: cst.Call, name: str, position: int) -> cst.Arg | None:
    kw = c.kwarg(call, name)
    if kw is not None:
        return kw
    positional = [a for a in call.args if a.keyword is None]
    return positional[position] if len(positional) > position else None


def _paren(node: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(node, cst.Name | cst.Attribute | cst.Call | cst.Subscript | cst.Integer | cst.Float):
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


class Prologue:
    name = "prologue"
    kind = "Fusion"
    changes_numerics = False
    max_changed_lines = 30  # the producer's definition goes (most changed lines are removed ones)

    _pairs = Fusion._pairs  # consecutive launches in one host function, as fusion pairs them

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        module = c.parse(analysis.text)
        out = []
        for producer, consumer in self._pairs(analysis, kernel):
            try:
                plan = self._plan(module, analysis, producer, consumer)
            except ActionError:
                continue
            out.append(Candidate(self.name, self.kind, kernel.name, {"consumer": consumer} if kernel.name == producer
                                 else {"producer": producer},
                                 f"Compute {producer} in {consumer}'s load of {plan.buffer} (drops {plan.buffer} and a launch)",
                                 c.kernel_line(kernel)))
        return out

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Each consecutive pair's refusal (None when none is launched next to ``kernel``)."""
        module = c.parse(analysis.text)
        reasons = []
        for producer, consumer in self._pairs(analysis, kernel):
            try:
                self._plan(module, analysis, producer, consumer)
            except ActionError as exc:
                reasons.append(f"{producer} -> {consumer}: {exc}")
        return "; ".join(reasons) or None

    def _plan(self, module: cst.Module, analysis: FileAnalysis, producer_name: str, consumer_name: str) -> _Plan:
        producer, consumer = analysis.kernel(producer_name), analysis.kernel(consumer_name)
        if producer is None or consumer is None or producer is consumer:
            raise ActionError(f"no kernels {producer_name} and {consumer_name}")
        for k in (producer, consumer):
            if len(analysis.launches_of(k.name)) != 1:
                raise ActionError(f"{k.name} is launched more than once")
        if producer.is_autotuned or producer.heuristics or producer.loops or len(producer.calls_of("program_id")) != 1 \
                or producer.calls_of("dot", "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "rand", "randn"):
            raise ActionError(f"{producer.name} is not a plain 1-D elementwise kernel")
        pdef, (p_launch,) = c.locate(module, producer.name)
        cdef, (c_launch,) = c.locate(module, consumer.name)
        host = p_launch.host
        if host is None or host is not c_launch.host:
            raise ActionError("the two launches are not in the same host function")
        if any(a.star for a in (*p_launch.call.args, *c_launch.call.args)):
            raise ActionError("a launch passes *args or **kwargs")
        taken = c.names_in(pdef) | c.names_in(cdef)
        index, loads, compute, store = _normal_form(list(pdef.body.body), taken)
        dest, offs, value, mask = _store_parts(store)
        if producer.param(dest) is None or producer.param(dest).kind != "pointer":
            raise ActionError(f"{producer.name}'s store does not start from its output pointer")
        defs = {a[0]: a[1] for s in index if (a := _assign_of(s))}
        if offs not in defs:
            raise ActionError(f"{producer.name} does not store at named offsets (`offs = pid * BLOCK + tl.arange(0, BLOCK)`)")
        model = kernel_model(analysis, producer)
        flat = model.flat_block(model.stores()[0]) if model.single_binding(offs) is not None else None
        if flat is None or flat[1] not in model.params.values():  # ``offsets < n``, n what the launch passes
            raise ActionError(f"{producer.name} does not store one block per program masked by `offsets < n`")
        blocks = [p.name for p in producer.params if p.kind == "constexpr"]

        # The buffer: written by the producer, read once by the consumer.
        p_sources, c_sources = c.launch_sources(p_launch, producer), c.launch_sources(c_launch, consumer)
        buffer = p_sources.get(dest, "")
        if not buffer.isidentifier() or list(p_sources.values()).count(buffer) != 1:
            raise ActionError(f"{producer.name} does not write a host tensor it gets once")
        readers = [p.name for p in consumer.params if c_sources.get(p.name) == buffer]
        if len(readers) != 1 or consumer.param(readers[0]).kind != "pointer":
            raise ActionError(f"{consumer.name} does not get {buffer} once, as a pointer")
        buffer_param = readers[0]
        found = _find_buffer_loads(cdef, buffer_param)
        if len(found) != 1 or c.count_name(cdef, buffer_param) != 2:  # its parameter and the one load
            raise ActionError(f"{consumer.name} does more with {buffer_param} than one tl.load(ptr + offsets)")
        load = found[0]
        holder = c.statement_holding(cdef, next((s for s in _small_statements(cdef) if c.contains(s, cst.Call, lambda n: n is load)), None))
        if holder is None:
            raise ActionError(f"{consumer.name} loads {buffer} outside a simple statement")
        c_offs = c.expr(_base_and_offsets(load.args[0].value)[1])
        c_mask_arg, c_other_arg = _arg(load, "mask", 1), _arg(load, "other", 2)
        c_mask = c_mask_arg.value if c_mask_arg is not None else None

        # The host: buffer allocated fresh, only these two launches read its values, nothing between them but shapes.
        body = list(host.body.body)
        pi = next((i for i, s in enumerate(body) if _call_of(s) is p_launch.call), None)
        ci = next((i for i, s in enumerate(body) if _call_of(s) is c_launch.call), None)
        if pi is None or ci is None or ci < pi:
            raise ActionError("the launches are not top-level statements of the host function, in order")
        alloc = c.host_assignment(host, buffer)
        if alloc is None or not (isinstance(alloc.value, cst.Call) and c.code(alloc.value.func) in _ALLOCATORS):
            raise ActionError(f"{buffer} is not a fresh torch.empty/zeros allocation")
        alloc_line = c.statement_holding(host, alloc)
        value_reads = c.count_name(host, buffer) - _metadata_reads(host, buffer) - 1  # the allocation binds it
        if value_reads != 2:
            raise ActionError(f"the host uses {buffer} for something besides the two launches")
        read_by_producer = {n for src in p_sources.values() for n in c.names_in(c.expr(src))}
        for s in body[pi + 1:ci]:
            if _impure_calls(s) or (_assign_of(s) is None and not isinstance(s, cst.SimpleStatementLine)):
                raise ActionError("something other than shape arithmetic runs between the launches")
            if c.bound_names(s) & read_by_producer:
                raise ActionError(f"a statement between the launches rebinds what {producer.name} reads")
        dtype = self._element_type(alloc.value, buffer, p_sources, c_sources, producer, consumer)

        # The producer's computation in the consumer's names, at the consumer's offsets.
        p_params = {p.name: p for p in producer.params}
        used = set().union(*(c.names_in(s) for s in [*loads, *compute]), c.names_in(value))
        index_names = set(defs)
        locals_ = {_assign_of(s)[0] for s in [*loads, *compute]}
        free = used - index_names - locals_ - set(p_params) - _ALWAYS_FREE
        if free:
            raise ActionError(f"{producer.name} reads {', '.join(sorted(free))}, which the consumer would not have")
        constexprs = {n for n in used & set(p_params) if p_params[n].kind == "constexpr"}
        if constexprs:
            raise ActionError(f"{producer.name}'s value reads its constexpr {', '.join(sorted(constexprs))}")
        # Which index names the fused code reads (a load's mask is the consumer's when it has one), and through
        # them which of the producer's scalars: only those become the consumer's parameters.
        wanted = c.names_in(value) | set().union(*(c.names_in(_assign_of(s)[1]) for s in compute))
        for s in loads:
            call = _assign_of(s)[1]
            wanted |= c.names_in(call.args[0].value) | {n for a in call.args[1:] for n in c.names_in(a.value)
                                                        if c_mask is None or a is not _arg(call, "mask", 1)}
        frontier = wanted & index_names
        while frontier:
            name = frontier.pop()
            if name != offs:
                new_names = c.names_in(defs[name]) - wanted
                wanted |= new_names
                frontier |= new_names & index_names
        c_names = c.names_in(cdef)
        fused_taken = set(c_names)
        mapping: dict[str, str | cst.BaseExpression] = {}
        new_params: list[tuple[str, str]] = []
        for name in sorted(wanted & set(p_params)):
            if p_params[name].kind == "constexpr":
                continue
            source = p_sources.get(name)
            if source is None:
                raise ActionError(f"{producer.name}'s launch does not pass {name}")
            twin = next((p.name for p in consumer.params if c_sources.get(p.name) == source and p.name != buffer_param
                         and (p.kind == "pointer") == (p_params[name].kind == "pointer")), None)
            if twin is not None:
                mapping[name] = twin
                continue
            fresh = c.first_free(fused_taken, name, f"{name}_p", f"{name}_p2")
            fused_taken.add(fresh)
            mapping[name] = fresh
            new_params.append((fresh, source))
        for name in sorted(locals_):
            fresh = c.first_free(fused_taken, name, f"{name}_p", f"{name}_p2", f"{name}_p3")
            fused_taken.add(fresh)
            mapping[name] = fresh
        # Index names become expressions of the consumer's offsets (the offsets name itself: ``(O)``); the
        # producer's own names are renamed first, then the index names replaced by consumer expressions.
        index_exprs: dict[str, cst.BaseExpression] = {offs: _paren(c_offs)}
        for s in index:
            target, expr_ = _assign_of(s)
            if target == offs or target not in wanted:
                continue
            index_exprs[target] = _paren(c.substitute_names(c.substitute_names(expr_, mapping), index_exprs))

        if set(map(str, mapping.values())) & set(index_exprs):
            raise ActionError(f"a name of {consumer.name} is also one of {producer.name}'s index names")

        def fused(node):
            return c.substitute_names(c.substitute_names(node, {k: v for k, v in mapping.items() if k not in index_exprs}), index_exprs)

        statements: list[cst.BaseStatement] = []
        for s in loads:
            target, src_ptr, l_offs, _l_mask = _load_parts(s)
            call = _assign_of(s)[1]
            new_call = fused(call)
            if c_mask is not None:
                new_call = _with_mask(new_call, c_mask)
            statements.append(c.stmt(f"{mapping[target]} = {c.code(new_call)}\n"))
        for s in compute:
            statements.append(fused(s))
        fused_value = fused(value)
        leaked = c.names_in(fused_value) | set().union(*(c.names_in(s) for s in statements))
        if "program_id" in "".join(c.code(s) for s in statements) + c.code(fused_value) or leaked & set(blocks):
            raise ActionError(f"{producer.name}'s value depends on its program id or block, not only on its offsets")
        new_value = c.expr(f"({c.code(fused_value)}).to({dtype(mapping)})")
        if c_mask is not None and c_other_arg is not None:
            new_value = c.expr(f"tl.where({c.code(c_mask)}, {c.code(new_value)}, {c.code(c_other_arg.value)})")
        # New parameters go before the consumer's first constexpr, which the launch must pass by keyword.
        params = cdef.params
        if params.posonly_params or params.kwonly_params or isinstance(params.star_arg, cst.Param) or params.star_kwarg:
            raise ActionError(f"{consumer.name} has a signature this action does not extend (*args, keyword-only)")
        plist = list(params.params)
        insert_at = next((i for i, p in enumerate(plist) if consumer.param(p.name.value) is not None
                          and consumer.param(p.name.value).kind == "constexpr"), len(plist))
        positional = [a for a in c_launch.call.args if a.keyword is None]
        if len(positional) > insert_at or any(p.default is not None for p in plist[:insert_at]):
            raise ActionError(f"{consumer.name}'s launch passes constexprs by position, or its parameters have defaults")
        others = c.count_name(host, buffer) - 1 - c.count_name(p_launch.call, buffer) - c.count_name(c_launch.call, buffer)
        dead = _dead_with(host, [p_launch.call], {n for _, src in new_params for n in c.names_in(c.expr(src))})
        return _Plan(statements, new_value, load, holder, buffer, buffer_param, new_params, insert_at,
                     body[pi], alloc_line if others == 0 else None, dead)

    @staticmethod
    def _element_type(alloc: cst.Call, buffer: str, p_sources: dict, c_sources: dict, producer: Kernel, consumer: Kernel):
        """A function of the final parameter names -> the buffer's element type as Triton spells it, or ActionError."""
        dtype_arg = c.kwarg(alloc, "dtype")
        spelled = "".join(c.code(dtype_arg.value).split()) if dtype_arg is not None else None
        if spelled in _TORCH_TO_TL:
            return lambda mapping: _TORCH_TO_TL[spelled]
        like = None
        if spelled and spelled.endswith(".dtype"):
            like = spelled[:-len(".dtype")]
        elif spelled is None and c.code(alloc.func) in ("torch.empty_like", "torch.zeros_like") and alloc.args:
            like = "".join(c.code(alloc.args[0].value).split())
        if like is not None:
            c_param = next((p.name for p in consumer.params if c_sources.get(p.name) == like and p.kind == "pointer"), None)
            if c_param is not None:
                return lambda mapping: f"{c_param}.dtype.element_ty"
            p_param = next((p.name for p in producer.params if p_sources.get(p.name) == like and p.kind == "pointer"), None)
            if p_param is not None:
                return lambda mapping: f"{mapping.get(p_param, p_param)}.dtype.element_ty"
        raise ActionError(f"the element type of {buffer} is not a torch dtype or the dtype of a tensor the kernels get")

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        producer, consumer = params.get("producer", kernel.name), params.get("consumer", kernel.name)
        if not isinstance(producer, str) or not isinstance(consumer, str) or producer == consumer:
            raise ActionError("prologue needs params {'consumer': kernel} on the producer or {'producer': kernel} on the consumer")
        module = c.parse(text)
        plan = self._plan(module, analysis, producer, consumer)
        cdef, (c_launch,) = c.locate(module, consumer)
        new_holder = plan.holder.visit(_Replace(plan.load, plan.value))
        plist = list(cdef.params.params)
        index = next(i for i, p in enumerate(plist) if p.name.value == plan.buffer_param)
        plist = _insert(plist, plan.insert_at, [cst.Param(cst.Name(n)) for n, _ in plan.new_params])
        plist = _remove(plist, next(i for i, p in enumerate(plist) if p.name.value == plan.buffer_param))
        call = c_launch.call
        args = list(call.args)
        positional = [a for a in args if a.keyword is None]
        drop = c.kwarg(call, plan.buffer_param) or (positional[index] if index < len(positional) else None)
        if drop is None:
            raise ActionError(f"the launch of {consumer} does not pass {plan.buffer_param}")
        args = _remove(args, args.index(drop))
        args = _insert(args, len(args), [cst.Arg(c.expr(src), keyword=cst.Name(n), equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))) for n, src in plan.new_params])
        pairs: list = [(plan.holder, cst.FlattenSentinel([*plan.statements, new_holder])),
                       (cdef.params, cdef.params.with_changes(params=plist)),
                       (call, call.with_changes(args=args)),
                       (plan.p_statement, cst.RemovalSentinel.REMOVE)]
        if plan.alloc_statement is not None:
            pairs.append((plan.alloc_statement, cst.RemovalSentinel.REMOVE))
        pairs += [(st, cst.RemovalSentinel.REMOVE) for st in plan.dead]
        module = c.replace_all(module, pairs)
        module, dropped = _drop_consumer(module, producer)
        notes = [f"{producer} is no longer launched here; {consumer} computes {plan.buffer}'s values where it loaded them",
                 dropped.replace("consumer", "producer")]
        return c.finish(text, module, f"computed {producer} in {consumer}'s load of {plan.buffer}", notes)


class _Replace(cst.CSTTransformer):
    """Replace one node (by identity) with another."""

    def __init__(self, old: cst.CSTNode, new: cst.CSTNode):
        self.old, self.new = old, new

    def on_leave(self, original_node, updated_node):
        return self.new if original_node is self.old else updated_node


def _small_statements(fn: cst.FunctionDef) -> list[cst.BaseSmallStatement]:
    found: list[cst.BaseSmallStatement] = []

    class V(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
            found.extend(node.body)

    fn.visit(V())
    return found


def _insert(items: list, at: int, new: list) -> list:
    """``items`` (params or args) with ``new`` inserted at ``at``, commas kept where they were."""
    if not new:
        return items
    new = [n.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for n in new]
    if at < len(items):
        return items[:at] + new + items[at:]
    last = items[-1] if items else None
    if last is None:
        return [*new[:-1], new[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
    # Appending: the old last item's comma (a trailing one, or none) moves to the new last item.
    ending = last.comma
    return [*items[:-1], last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            *new[:-1], new[-1].with_changes(comma=ending)]


def _remove(items: list, at: int) -> list:
    """``items`` without the one at ``at``; a removed last item leaves its comma (or none) to the one before."""
    if at == len(items) - 1 and at > 0:
        return [*items[:at - 1], items[at - 1].with_changes(comma=items[at].comma)]
    return items[:at] + items[at + 1:]


def _with_mask(call: cst.Call, mask: cst.BaseExpression) -> cst.Call:
    """``call`` (a tl.load) masked by ``mask`` instead of its own mask."""
    args = list(call.args)
    kw = c.kwarg(call, "mask")
    if kw is not None:
        return call.with_changes(args=[a.with_changes(value=mask) if a is kw else a for a in args])
    positional = [a for a in args if a.keyword is None]
    if len(positional) > 1:
        return call.with_changes(args=[a.with_changes(value=mask) if a is positional[1] else a for a in args])
    return c.set_kwarg(call, "mask", mask)


ACTION = Prologue()
