"""Fusion: fold an elementwise kernel that consumes another kernel's output into that kernel's store.

The producer computes the consumer's expression on its value in registers and stores the final
result; the intermediate buffer, its allocation and the second launch go away. Offered when both
kernels are 1-D elementwise kernels launched once, one after the other in the same host function
over the same grid (a name bound once, ``grid = (...)``, is the expression it names), indexing and
size arguments, the consumer reads the intermediate once, and the intermediate buffer is used for
nothing else. The value is cast to the intermediate's element type
first (what storing and reloading it did), so the numbers stay exactly the same. A consumer's other
inputs (``mul_kernel(act, b, prod, ...)``: ``b``) must be host names loaded with the same offsets and
mask; each becomes a new pointer parameter of the producer, inserted after the launch's positional
arguments (``silu_kernel(x_ptr, y_ptr, n, b_ptr, BLOCK)``), and is loaded after the producer's value.
The consumer's definition (decorators and the comments right above it included) goes too when
nothing else in the file refers to its name any more (another launch or call, an import or export,
``__all__``, any string naming it); otherwise it stays.

Example: kernel=scale_kernel target=h100 params={"consumer": "relu_kernel"}

```python before
@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, 3.0 * tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def relu_kernel(y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(y, 0.0), mask=mask)


def scaled_relu(x):
    y = torch.empty_like(x)
    out = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), 256),)
    scale_kernel[grid](x, y, x.numel(), BLOCK=256)
    relu_kernel[grid](y, out, x.numel(), BLOCK=256)
    return out
```

```python after
@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = (3.0 * tl.load(x_ptr + offs, mask=mask)).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + offs, tl.maximum(y, 0.0), mask=mask)


def scaled_relu(x):
    out = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), 256),)
    scale_kernel[grid](x, out, x.numel(), BLOCK=256)
    return out
```
"""

from __future__ import annotations

import ast
import keyword
import re
import textwrap
from dataclasses import dataclass, field

import libcst as cst

from ..analysis import FileAnalysis, Kernel
from ..analysis.kernel_model import kernel_model
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from ._consumer_fusion import consumer_param
from .base import ActionError, Candidate, Edit

_ALLOCATORS = ("torch.empty_like", "torch.empty", "torch.zeros_like", "torch.zeros")
_ALWAYS_FREE = {"tl", "triton", "float", "int"}


@dataclass
class _Plan:
    producer: Kernel
    consumer: Kernel
    host: cst.FunctionDef
    p_launch: c.LaunchNode
    c_launch: c.LaunchNode
    p_store: cst.SimpleStatementLine
    p_value: cst.BaseExpression
    p_dest: str  # producer pointer param the store writes
    load_target: str
    segment: list[cst.BaseStatement]  # consumer statements between its load and its store
    c_value: cst.BaseExpression
    buffer: str  # host name of the intermediate
    out_source: str  # host expression the consumer writes to
    # The consumer's other inputs: (its load statement, its pointer param, the producer's new param, host name).
    extra: list[tuple[cst.SimpleStatementLine, str, str, str]] = field(default_factory=list)
    insert_at: int = 0  # where the new pointer params go in the producer's signature and launch


def _call_of(statement: cst.CSTNode) -> cst.Call | None:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(statement.body[0], cst.Expr):
        value = statement.body[0].value
        return value if isinstance(value, cst.Call) else None
    return None


def _store_parts(statement: cst.CSTNode) -> tuple[str, str, cst.BaseExpression, str] | None:
    """``tl.store(P + OFFS, VALUE, mask=M)`` (mask by keyword or third) -> (P, OFFS, VALUE, M)."""
    call = _call_of(statement)
    if call is None or c.code(call.func) != "tl.store" or len(call.args) != 3:
        return None
    ptr, value, mask = call.args
    if (mask.keyword is not None and mask.keyword.value != "mask") or ptr.keyword or value.keyword:
        return None
    based = _base_and_offsets(ptr.value)
    if based is None:
        return None
    return based[0], based[1], value.value, c.code(mask.value)


def _base_and_offsets(pointer: cst.BaseExpression) -> tuple[str, str] | None:
    """``P + OFFS`` -> (P, OFFS); a chain ``P + A + B`` (a 2-D tile's row and column terms) -> (P, "A + B")."""
    terms = []
    while isinstance(pointer, cst.BinaryOperation) and isinstance(pointer.operator, cst.Add) and not pointer.lpar:
        terms.append(pointer.right)
        pointer = pointer.left
    if not isinstance(pointer, cst.Name) or not terms:
        return None
    return pointer.value, " + ".join(c.code(t).strip() for t in reversed(terms))


def _load_call_parts(call: cst.Call) -> tuple[str, str, str] | None:
    """``tl.load(P + OFFS, mask=M)`` (mask by keyword or second) -> (P, OFFS, M)."""
    if not (c.code(call.func) == "tl.load" and call.args and call.args[0].keyword is None):
        return None
    based = _base_and_offsets(call.args[0].value)
    if based is None:
        return None
    mask = c.kwarg(call, "mask")
    if mask is None and len(call.args) > 1 and call.args[1].keyword is None:
        mask = call.args[1]
    return based[0], based[1], c.code(mask.value) if mask else ""


def _load_parts(statement: cst.CSTNode) -> tuple[str, str, str, str] | None:
    """``t = tl.load(P + OFFS, mask=M)`` -> (t, P, OFFS, M)."""
    single = _assign_of(statement)
    if single is None or not isinstance(single[1], cst.Call):
        return None
    parts = _load_call_parts(single[1])
    return (single[0], *parts) if parts else None


def _assign_of(statement: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(statement.body[0], cst.Assign)):
        return None
    assign = statement.body[0]
    if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    return assign.targets[0].target.value, assign.value


class _NameLoads(cst.CSTTransformer):
    """Replace ``tl.load(...)`` calls inside an expression by fresh names, recording ``name = tl.load(...)``."""

    def __init__(self, taken: set[str]):
        self.taken = taken
        self.loads: list[cst.SimpleStatementLine] = []

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call):
        parts = _load_call_parts(updated_node)
        if parts is None:
            return updated_node
        base = parts[0][:-4] if parts[0].endswith("_ptr") and len(parts[0]) > 4 else parts[0]
        # ``in_ptr`` -> ``in`` is a keyword: never a name to bind
        name = next(n for n in (base, f"{base}_val", *(f"{base}_{i}" for i in range(2, 99)))
                    if n not in self.taken and not keyword.iskeyword(n))
        self.taken.add(name)
        self.loads.append(c.stmt(f"{name} = {c.code(updated_node)}\n"))
        return cst.Name(name)


def _normal_form(body: list[cst.BaseStatement], taken: set[str]):
    """A straight-line elementwise body as (index statements, loads, compute statements, store), inline loads named.

    Loads read memory nothing in the kernel writes before its only store, so they may move up to
    right after the index computations; every name must be assigned once for the reordering to hold.
    """
    body = [s for s in body if not c.is_docstring(s)]
    if not body or _store_parts(body[-1]) is None:
        raise ActionError("the kernel does not end in `tl.store(ptr + offsets, value, mask=mask)`")
    assigned: list[str] = []
    index, loads, compute = [], [], []
    load_derived: set[str] = set()
    for statement in body[:-1]:
        single = _assign_of(statement)
        if single is None:
            raise ActionError("the kernel does more than assign values before its store")
        target, value = single
        assigned.append(target)
        if _load_parts(statement):
            loads.append(statement)
            load_derived.add(target)
            continue
        namer = _NameLoads(taken)
        new_value = value.visit(namer)
        loads.extend(namer.loads)
        load_derived |= {_assign_of(l)[0] for l in namer.loads}
        statement = statement.with_changes(body=[statement.body[0].with_changes(value=new_value)])
        if c.names_in(new_value) & load_derived:
            load_derived.add(target)
            compute.append(statement)
        else:
            index.append(statement)
    if len(assigned) != len(set(assigned)):
        raise ActionError("a name is assigned twice")
    store = body[-1]
    call = _call_of(store)
    namer = _NameLoads(taken)
    value = call.args[1].value.visit(namer)
    loads.extend(namer.loads)
    if any(c.code(a.value).count("tl.load") for i, a in enumerate(call.args) if i != 1):
        raise ActionError("the store's address or mask loads memory")
    store = store.with_changes(body=[store.body[0].with_changes(value=call.with_changes(
        args=[call.args[0], call.args[1].with_changes(value=value), call.args[2]]))])
    for load in loads:
        _t, _p, offs, mask = _load_parts(load)
        if (c.names_in(c.expr(offs)) | (c.names_in(c.expr(mask)) if mask else set())) & load_derived:
            raise ActionError("a load's address depends on loaded values (a gather)")
    return index, loads, compute, store


# Calls a host statement between two launches may make: they only look at shapes and allocate.
_HOST_PURE = {"torch.empty_like", "torch.empty", "torch.zeros_like", "torch.zeros", "triton.cdiv", "min", "max", "int", "len"}
_SHAPE_ATTRS = {"numel", "shape", "stride", "dtype", "device", "size", "dim", "ndim", "element_size"}


def _impure_calls(node: cst.CSTNode) -> bool:
    """True when the statement calls something other than shape arithmetic and allocation."""

    def impure(call: cst.Call) -> bool:
        attr = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
        return c.code(call.func) not in _HOST_PURE and attr not in _SHAPE_ATTRS

    return c.contains(node, cst.Call, impure)


def _dead_with(host: cst.FunctionDef, removed: list[cst.CSTNode], still_read: set[str]) -> list[cst.BaseStatement]:
    """Top-level shape arithmetic (``name = expr``, no impure call) that only the ``removed`` launches read: it goes
    with them. Names in ``still_read`` (what the edited launches now read) stay."""
    dead = []
    for statement in host.body.body:
        single = _assign_of(statement)
        if single is None or single[0] in still_read or _impure_calls(statement):
            continue
        read_by_removed = sum(c.count_name(r, single[0]) for r in removed)
        if read_by_removed and c.count_name(host, single[0]) == 1 + read_by_removed:
            dead.append(statement)
    return dead


def _returns(fn: cst.FunctionDef) -> bool:
    """True when the kernel body holds a ``return`` (an early exit for some programs)."""
    return c.contains(fn.body, cst.Return)


def bound_once(fn: cst.FunctionDef) -> set[str]:
    """Names ``fn`` binds exactly once anywhere inside (parameters count): their value never changes once bound."""
    return {name for name, count in binding_counts(fn).items() if count == 1}


def binding_counts(fn: cst.FunctionDef) -> dict[str, int]:
    """How often ``fn`` binds each name anywhere inside (parameters, assignments, imports, nested defs, handlers)."""
    tree = ast.parse(textwrap.dedent(c.code(fn).lstrip("\n")))
    counts: dict[str, int] = {}
    top = tree.body[0]
    for sub in ast.walk(top):
        names: list[str] = []
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store | ast.Del):
            names = [sub.id]
        elif isinstance(sub, ast.arg):
            names = [sub.arg]
        elif isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and sub is not top:
            names = [sub.name]
        elif isinstance(sub, ast.alias):
            names = [(sub.asname or sub.name).split(".")[0]]
        elif isinstance(sub, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and sub.name:
            names = [sub.name]
        elif isinstance(sub, ast.MatchMapping) and sub.rest:
            names = [sub.rest]
        elif isinstance(sub, ast.Global | ast.Nonlocal):
            names = list(sub.names) * 2
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    return counts


def _same_grid(host: cst.FunctionDef, p_launch: c.LaunchNode, c_launch: c.LaunchNode) -> bool:
    """Whether both launches use one grid: spelled alike, or one names (``grid = (...)``) what the other spells out.

    A named grid counts by its expression only when the name and every host name the expression reads are
    bound once in the host, so the expression has the same value at both launches.
    """
    p_grid, c_grid = (launch.call.func.slice[0].slice.value for launch in (p_launch, c_launch))  # type: ignore[union-attr]
    if c.code(p_grid) == c.code(c_grid):
        return True
    counts = binding_counts(host)
    bound, once = set(counts), {name for name, count in counts.items() if count == 1}

    def resolved(grid: cst.BaseExpression) -> cst.BaseExpression | None:
        if isinstance(grid, cst.Name) and grid.value in bound:
            if grid.value not in once or (assign := c.host_assignment(host, grid.value)) is None:
                return None
            grid = assign.value
        lambda_params = {p.name.value for lam in _all(grid, cst.Lambda) for p in lam.params.params}
        reads = c.names_in(grid) - lambda_params
        return grid if not (reads & bound) - once else None

    p_value, c_value = resolved(p_grid), resolved(c_grid)
    return p_value is not None and c_value is not None and c.code(p_value) == c.code(c_value)


def _all(node: cst.CSTNode, kind: type[cst.CSTNode]) -> list:
    """Every ``kind`` node inside ``node``."""
    found: list = []

    class V(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            if isinstance(n, kind):
                found.append(n)
            return True

    node.visit(V())
    return found


def _only_access(accesses: list, pointer: str):
    """The one access through kernel parameter ``pointer`` (None when there are none or several)."""
    found = [a for a in accesses if a.tensor == pointer]
    return found[0] if len(found) == 1 else None


def _binding_meaning(model, name: str) -> tuple | None:
    """What a name bound once means, in host terms: its index value, or its mask (None when neither is understood)."""
    binding = model.single_binding(name)
    if binding is None:
        return None
    if binding.expr is not None:
        return ("value", model.in_host_terms(binding.expr))
    return ("mask", model.bounds_in_host_terms(binding.bounds)) if binding.bounds is not None else None


def _top_statement(host: cst.FunctionDef, call: cst.Call) -> int | None:
    for i, statement in enumerate(host.body.body):
        if _call_of(statement) is call:
            return i
    return None


class Fusion:
    name = "fusion"
    kind = "Fusion"
    changes_numerics = False

    def _pairs(self, analysis: FileAnalysis, kernel: Kernel) -> list[tuple[str, str]]:
        """(producer, consumer) pairs that involve ``kernel`` and launch one after the other."""
        out = []
        for host in analysis.host_functions:
            sites = [s for s in analysis.launches if s.host_function == host.name]
            for first, second in zip(sites, sites[1:]):
                if kernel.name in (first.kernel, second.kernel) and first.kernel != second.kernel:
                    out.append((first.kernel, second.kernel))
        return out

    def _plan(self, module: cst.Module, analysis: FileAnalysis, producer_name: str, consumer_name: str) -> _Plan:
        producer, consumer = analysis.kernel(producer_name), analysis.kernel(consumer_name)
        if producer is None or consumer is None:
            raise ActionError(f"no kernels {producer_name} and {consumer_name}")
        for k in (producer, consumer):
            if k.is_autotuned or k.loops or len(k.calls_of("program_id")) != 1 or k.calls_of("dot", *(
                    "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg")):
                raise ActionError(f"{k.name} is not a plain 1-D elementwise kernel")
            if len(analysis.launches_of(k.name)) != 1:
                raise ActionError(f"{k.name} is launched more than once")
        pdef, (p_launch,) = c.locate(module, producer.name)
        cdef, (c_launch,) = c.locate(module, consumer.name)
        if p_launch.host is None or p_launch.host is not c_launch.host:
            raise ActionError("the two launches are not in the same host function")
        host = p_launch.host
        pi, ci = _top_statement(host, p_launch.call), _top_statement(host, c_launch.call)
        if pi is None or ci is None or ci <= pi:
            raise ActionError(f"{consumer.name} is not launched after {producer.name} in the same block")
        # Between the launches only shape arithmetic and allocations that leave the producer's inputs alone:
        # the fused launch takes the consumer's place.
        p_reads = c.names_in(p_launch.call) | c.names_in(c.grid_expression(p_launch))
        for st in host.body.body[pi + 1:ci]:
            if not (isinstance(st, cst.SimpleStatementLine) and all(isinstance(b, cst.Assign) for b in st.body)) or _impure_calls(st):
                raise ActionError(f"something other than shape arithmetic runs between {producer.name} and {consumer.name}")
            written = set().union(*[c.names_in(t.target) for b in st.body for t in b.targets])
            if written & p_reads:
                raise ActionError(f"a statement between the launches changes what {producer.name} reads")
        if not _same_grid(host, p_launch, c_launch):
            raise ActionError("the launches use different grids")
        # Kernel bodies: the producer ends in its only store; the consumer, in normal form, is index
        # statements, loads (inline ones named), compute statements and its store.
        p_body = [st for st in pdef.body.body if not c.is_docstring(st)]
        if _returns(pdef):
            raise ActionError(f"{producer.name} returns early: the consumer's work would not run for those programs")
        p_parts = _store_parts(p_body[-1]) if p_body else None
        if p_parts is None or len(producer.calls_of("store")) != 1:
            raise ActionError(f"{producer.name} does not end in its only `tl.store(ptr + offsets, value, mask=mask)`")
        p_dest, p_offs, p_value, p_mask = p_parts
        if len(consumer.calls_of("store")) != 1:
            raise ActionError(f"{consumer.name} does not store one output")
        taken = c.names_in(pdef) | c.names_in(cdef)
        c_index, c_loads, segment, c_store = _normal_form(list(cdef.body.body), taken)
        c_dest, _offsets, c_value, _mask = _store_parts(c_store)
        p_site, c_site = analysis.launches_of(producer.name)[0], analysis.launches_of(consumer.name)[0]
        p_sources = {k: v for k, v in c.launch_sources(p_launch, producer).items()}
        c_sources = {k: v for k, v in c.launch_sources(c_launch, consumer).items()}
        dest_source = p_sources.get(p_dest)
        from_buffer = [l for l in c_loads if dest_source is not None and c_sources.get(_load_parts(l)[1]) == dest_source]
        if len(from_buffer) != 1:
            raise ActionError(f"{consumer.name} does not read the buffer {producer.name} writes exactly once")
        target, c_src, _offsets, _mask = _load_parts(from_buffer[0])
        # Index expressions compare by meaning, in the kernel model: over what each launch passes.
        p_defs = {a[0]: a[1] for st in p_body[:-1] if (a := _assign_of(st)) and "tl.load" not in c.code(a[1])}
        pm, cm = kernel_model(analysis, producer), kernel_model(analysis, consumer)

        def meaning(model, access) -> tuple | None:
            if access is None or access.offset is None or access.indirect or access.bounds is None:
                return None
            return model.in_host_terms(access.offset), model.bounds_in_host_terms(access.bounds)

        stored = meaning(pm, pm.stores()[0])
        if stored is None or not stored == meaning(cm, _only_access(cm.loads(), c_src)) == meaning(cm, cm.stores()[0]):
            raise ActionError("the kernels index or mask differently")
        # Consumer names -> producer names: parameters by the host value, index names by their meaning.
        rename: dict[str, str] = {}
        for name, source in c_sources.items():
            twin = [pn for pn, ps in p_sources.items() if ps == source and pn != p_dest]
            if twin and name not in (c_src, c_dest):
                rename[name] = twin[0]
        p_meaning = {}
        for name in p_defs:
            p_meaning.setdefault(_binding_meaning(pm, name), name)
        for name in (a[0] for st in c_index if (a := _assign_of(st))):
            found = _binding_meaning(cm, name)
            if found is not None and found in p_meaning:
                rename[name] = p_meaning[found]
        extra_loads = [l for l in c_loads if l is not from_buffer[0]]
        extra_targets: set[str] = set()
        extra_params: set[str] = set()
        for statement in extra_loads:
            e_target, e_ptr, _offsets, _mask = _load_parts(statement)
            if meaning(cm, _only_access(cm.loads(), e_ptr)) != stored:
                raise ActionError(f"{consumer.name} loads {e_ptr} with other indices or mask than {producer.name} stores")
            e_arg = c_site.arg(e_ptr)
            if e_arg is None or not isinstance(c.expr(e_arg.source.strip()), cst.Name) or e_ptr in extra_params \
                    or e_ptr == c_src or e_target in extra_targets | {target}:
                raise ActionError(f"{consumer.name}'s input {e_ptr} is not a plain host tensor loaded once")
            extra_targets.add(e_target)
            extra_params.add(e_ptr)
            rename.pop(e_ptr, None)
        # Launch arguments: every other consumer argument is passed to the producer too; the buffer links them.
        buffer_arg, out_arg = c_site.arg(c_src), c_site.arg(c_dest)
        dest_arg = p_site.arg(p_dest)
        if buffer_arg is None or out_arg is None or dest_arg is None or buffer_arg.source != dest_arg.source:
            raise ActionError(f"{consumer.name} does not read the buffer {producer.name} writes")
        for arg in c_site.args:
            if arg.param in (c_src, c_dest) or arg.param in extra_params:
                continue
            if arg.param is None or arg.param not in rename:
                raise ActionError(f"{arg.param} is passed differently to the two kernels")
        buffer = buffer_arg.source.strip()
        if c.count_name(host, buffer) != 3:  # allocation + the two launches (nothing between them reads it)
            raise ActionError(f"the buffer {buffer} is used for more than passing it between the kernels")
        alloc = c.host_assignment(host, buffer)
        out_alloc = c.host_assignment(host, out_arg.source.strip())
        if alloc is None or not (isinstance(alloc.value, cst.Call) and c.code(alloc.value.func) in _ALLOCATORS):
            raise ActionError(f"{buffer} is not a fresh torch.empty/zeros allocation")
        if out_alloc is None or c.code(out_alloc.value) != c.code(alloc.value):
            raise ActionError(f"{out_arg.source} is not allocated like {buffer} (its element type may differ)")
        out_line = next(i for i, st in enumerate(host.body.body) if isinstance(st, cst.SimpleStatementLine) and out_alloc in st.body)
        if out_line > ci:
            raise ActionError(f"{out_arg.source} is allocated after the second launch")
        # The consumer's compute statements, value and other loads, in the producer's names.
        # The consumer's own values keep their names unless the producer binds them too: those get fresh ones, so the
        # fused kernel still assigns each name once (and fuses again with the next consumer).
        producer_names = c.names_in(pdef)
        for old in sorted({target} | extra_targets | {_assign_of(st)[0] for st in segment}):
            rename.pop(old, None)
            if old in producer_names:
                rename[old] = next(n for n in (f"{old}_{i}" for i in range(1, 1000)) if n not in taken)
                taken.add(rename[old])
        target = rename.get(target, target)
        extra_targets = {rename.get(t, t) for t in extra_targets}
        segment = [c.substitute_names(st, rename) for st in segment]
        c_value = c.substitute_names(c_value, rename)
        extra_loads = [c.substitute_names(st, {k: v for k, v in rename.items() if k not in extra_params}) for st in extra_loads]
        seg_written = {_assign_of(st)[0] for st in segment}
        free = set().union(*[c.names_in(_assign_of(st)[1]) for st in segment]) | c.names_in(c_value) if segment else c.names_in(c_value)
        allowed = {target} | extra_targets | seg_written | _ALWAYS_FREE | set(p_defs) | {p.name for p in producer.params}
        if not free <= allowed:
            raise ActionError(f"{consumer.name} reads {', '.join(sorted(free - allowed))}, which the producer does not have")
        clobbered = (seg_written | {target} | extra_targets) & (c.names_in(c.expr(p_offs)) | c.names_in(c.expr(p_mask)) | {p_dest})
        if clobbered:
            raise ActionError(f"the consumer's names {', '.join(sorted(clobbered))} would overwrite the producer's")
        extra, insert_at = self._extra_params(pdef, cdef, p_launch, c_site, extra_loads, taken) if extra_loads else ([], 0)
        return _Plan(producer, consumer, host, p_launch, c_launch, p_body[-1], p_value, p_dest, target, segment,
                     c_value, buffer, out_arg.source.strip(), extra, insert_at)

    @staticmethod
    def _extra_params(pdef: cst.FunctionDef, cdef: cst.FunctionDef, p_launch: c.LaunchNode, c_site,
                      extra_loads: list[cst.SimpleStatementLine], taken: set[str]) -> tuple[list, int]:
        """Fresh producer pointer params for the consumer's other inputs, inserted after the launch's positional args."""
        params = pdef.params
        if params.posonly_params or params.kwonly_params or isinstance(params.star_arg, cst.Param) or params.star_kwarg:
            raise ActionError(f"{c.code(pdef.name)} has a signature fusion does not extend (*args, keyword-only)")
        positional = [a for a in p_launch.call.args if a.keyword is None]
        if any(a.star for a in p_launch.call.args) or list(p_launch.call.args[:len(positional)]) != positional:
            raise ActionError("the producer's launch mixes positional and keyword arguments")
        insert_at = len(positional)
        if insert_at > len(params.params) or any(p.default is not None for p in params.params[:insert_at]):
            raise ActionError("the producer's positional parameters do not line up with its launch")
        extra = []
        producer_names = c.names_in(pdef)
        for statement in extra_loads:
            _t, e_ptr, _o, _m = _load_parts(statement)
            source = c_site.arg(e_ptr).source.strip()
            # The consumer's own parameter name is free unless the producer uses it (only the moved load names it).
            new = next((n for n in (e_ptr, f"{source}_ptr", f"{c.code(cdef.name)}_{e_ptr}")
                        if n not in taken or (n == e_ptr and n not in producer_names | {x[2] for x in extra})), None)
            if new is None:
                raise ActionError(f"no free name for {e_ptr} in {c.code(pdef.name)}")
            taken.add(new)
            extra.append((statement, e_ptr, new, source))
        return extra, insert_at

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        module = c.parse(analysis.text)
        out = []
        for producer, consumer in self._pairs(analysis, kernel):
            try:
                plan = self._plan(module, analysis, producer, consumer)
            except ActionError:
                continue
            out.append(Candidate(
                self.name, self.kind, producer, {"consumer": consumer},
                f"Fuse {consumer} into {producer}'s store (drops buffer {plan.buffer} and one launch)",
                analysis.kernel(producer).calls_of("store")[0].span.start.line,
            ))
        return out

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        consumer = consumer_param(self.name, params)
        module = c.parse(text)
        plan = self._plan(module, analysis, kernel.name, consumer)
        cast = c.stmt(f"{plan.load_target} = ({c.code(plan.p_value)}).to({plan.p_dest}.dtype.element_ty)\n")
        cast = cast.with_changes(leading_lines=plan.p_store.leading_lines)
        store_call = _call_of(plan.p_store)
        new_store = plan.p_store.with_changes(
            leading_lines=[],
            body=[plan.p_store.body[0].with_changes(value=store_call.with_changes(
                args=[store_call.args[0], store_call.args[1].with_changes(value=plan.c_value), store_call.args[2]]))],
        )
        # The consumer's other inputs are loaded in the producer through new pointer params, after the cast
        # (so the producer's value is computed from its own names first).
        loads = [c.substitute_names(statement, {ptr: new}) for statement, ptr, new, _src in plan.extra]
        fused = cst.FlattenSentinel([cast, *loads, *plan.segment, new_store])
        # Host: the producer now writes the consumer's output; the buffer and second launch go.
        p_call = plan.p_launch.call
        args = [a.with_changes(value=c.expr(plan.out_source)) if a.keyword is None and isinstance(a.value, cst.Name)
                and a.value.value == plan.buffer else a for a in p_call.args]
        signature = []
        if plan.extra:
            at = plan.insert_at
            args = args[:at] + [cst.Arg(cst.Name(src)) for _s, _p, _n, src in plan.extra] + args[at:]
            pdef, _ = c.locate(module, kernel.name)
            params = list(pdef.params.params)
            params = params[:at] + [cst.Param(cst.Name(new)) for _s, _p, new, _src in plan.extra] + params[at:]
            signature = [(pdef.params, pdef.params.with_changes(params=params))]
        c_line = next(s for s in plan.host.body.body if _call_of(s) is plan.c_launch.call)
        p_line = next(s for s in plan.host.body.body if _call_of(s) is p_call)
        alloc = c.host_assignment(plan.host, plan.buffer)
        alloc_line = next(s for s in plan.host.body.body if isinstance(s, cst.SimpleStatementLine) and alloc in s.body)
        # The fused launch runs where the consumer ran (what lies between only computed shapes and allocated).
        func = p_call.func
        if isinstance(plan.c_launch.call.func.slice[0].slice.value, cst.Name) \
                and not isinstance(func.slice[0].slice.value, cst.Name):  # type: ignore[union-attr]
            func = func.with_changes(slice=plan.c_launch.call.func.slice)  # the consumer's named grid would go unused
        fused_line = p_line.with_changes(body=[p_line.body[0].with_changes(value=p_call.with_changes(func=func, args=args))])
        module = c.replace_all(module, signature + [
            (plan.p_store, fused),
            (p_line, cst.RemovalSentinel.REMOVE),
            (c_line, fused_line),
            (alloc_line, cst.RemovalSentinel.REMOVE),
        ])
        module, dropped = _drop_consumer(module, consumer)
        notes = [f"{consumer} is no longer launched here; {plan.buffer} is gone", dropped]
        return c.finish(text, module, f"fused {consumer} into {kernel.name}", notes)


ACTION = Fusion()


def _drop_consumer(module: cst.Module, consumer: str) -> tuple[cst.Module, str]:
    """``module`` without the fused consumer's definition when nothing refers to it any more, and a note saying which."""
    module, kept_because = _drop_unreferenced_def(module, consumer)
    return module, (f"{consumer} stays defined: {kept_because}" if kept_because
                    else f"{consumer}'s definition is removed: nothing in the file refers to it any more")


def _drop_unreferenced_def(module: cst.Module, name: str) -> tuple[cst.Module, str | None]:
    """``module`` without the top-level ``def name`` when nothing else refers to it, else why it stays."""
    index = next((i for i, s in enumerate(module.body) if isinstance(s, cst.FunctionDef) and s.name.value == name), None)
    if index is None:
        return module, "it is not defined at module level"
    definition = module.body[index]
    references = _References(definition, name)
    module.visit(references)
    if references.found:
        return module, "the file still refers to it"
    return remove_definition(module, index), None


def remove_definition(module: cst.Module, index: int) -> cst.Module:
    """``module`` without its top-level statement ``index`` and the comment block right above it."""
    definition = module.body[index]
    body = list(module.body)
    del body[index]
    # The comment block right above the definition describes it and goes with it; comments further up
    # (separated by a blank line, such as a section header) stay, in front of whatever follows.
    lines = list(definition.leading_lines)
    attached = len(lines)
    while attached and lines[attached - 1].comment is not None:
        attached -= 1
    detached = lines[:attached]
    if any(line.comment is not None for line in detached):
        while detached[-1].comment is None:
            detached.pop()
        if index < len(body):
            body[index] = body[index].with_changes(leading_lines=[*detached, *body[index].leading_lines])
        else:
            return module.with_changes(body=body, footer=[*detached, *module.footer])
    return module.with_changes(body=body)


class _References(cst.CSTVisitor):
    """Whether code outside ``definition`` names ``name``: any Name (reads, imports, attributes) or string."""

    def __init__(self, definition: cst.FunctionDef, name: str):
        self.definition = definition
        self.name = name
        # Strings count when they hold the name as a word: ``__all__``, ``getattr(mod, "...")``, exec'd code.
        self.word = re.compile(rf"(?<!\w){re.escape(name)}(?!\w)")
        self.found = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is not self.definition

    def visit_Name(self, node: cst.Name) -> None:
        self.found = self.found or node.value == self.name

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.found = self.found or bool(self.word.search(node.value))

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
        self.found = self.found or bool(self.word.search(node.value))
