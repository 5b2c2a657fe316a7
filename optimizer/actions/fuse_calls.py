"""Fuse calls: fold a consumer wrapper's elementwise kernel into the producer wrapper's kernel it is composed with.

Users often write one host wrapper per kernel and compose the wrappers (``relu(add(x, y))``, or
``t = add(x, y)`` then ``relu(t)``); ``fusion`` needs both launches in one host function, so it never
sees that chain. This step inlines the two wrapper calls into the composing function (wrapper locals
renamed where they clash, parameters bound to the call's arguments, the producer's ``return out``
becoming what the consumer reads), then runs ``fusion`` on that producer/consumer pair (or
``matmul_epilogue`` when the producer is a matmul: ``gelu(linear(x, w, b))``) and returns the combined
edit. To give fusion one grid and one size argument, shape queries of a tensor the wrappers allocated
(``t.numel()``, ``torch.empty_like(t)``) read the tensor it was allocated from (``torch.empty_like(x)``
has x's shape, dtype, device and layout; ``torch.empty(x.shape, device=x.device, dtype=x.dtype)`` all but
the layout, and ``torch.empty_like`` of it allocates the same), and a consumer local that repeats a
producer local's shape arithmetic (``n = x.numel()``) reuses it.

One side may be a launch the composer writes itself: ``t = torch.empty_like(x)``,
``add_kernel[grid](x, y, t, n, BLOCK=1024)``, ``return relu(t)`` (or ``t = add(x, y)`` read by a launch);
only the wrapper is inlined, and the composer's names bound once stand for the facts. That is also
what one step leaves behind, so a chain of three (``gelu(mul(add(x, y), z))``, or through names) fuses
by repeating the step: the innermost nested pair first, and ``u = mul(t, z)`` allocates the result as
``u`` so no alias is left between the steps. Whether the intermediate is private (passed between the two
kernels and nothing else: not returned, not read again, not rebound) is fusion's check; ``mtmc actions
--why`` gives its reason when it is not.

Offered when each wrapper is a plain top-level function (no decorators, no ``*args``, literal
defaults only) whose straight-line body assigns names once, may assert, launches one kernel and ends
in ``return out`` of a tensor it allocated with ``torch.empty``/``torch.empty_like``; the consumer's
asserts (reads and shape queries only) move right after the fused launch; the calls are in a ``return``
or a single assignment in the composer's body (a top-level function, or a method such as
``ModelNew.forward``), with names or literals as arguments, nested in outer calls, tuples or operators
only where nothing but names, literals and attribute lookups is evaluated before them (the inlined
code runs before the statement); an inlined wrapper is
used nowhere else in the file (no other call, reference or string naming it) and the producer
kernel is named nowhere but in its wrapper or its one launch, because the kernel is changed in place
and the wrappers are removed (a wrapper another caller still needs is refused, not copied). Everything
fusion checks then has to hold on the inlined function.

Example: kernel=add_kernel target=h100 params={"consumer": "relu_kernel"}

```python before
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out


def relu(x):
    out = torch.empty_like(x)
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out


def add_relu(x, y):
    return relu(add(x, y))
```

```python after
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = (tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask)).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def add_relu(x, y):
    n = x.numel()
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out
```
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass

import libcst as cst

from ..analysis import FileAnalysis, Kernel, analyze
from ..analysis.model import Value
from ..edits import changed_line_count
from ..hardware import GpuProfile
from . import _common as c
from ._consumer_fusion import consumer_param
from .base import ActionError, Candidate, Edit
from .fusion import ACTION as FUSION
from .fusion import _impure_calls, bound_once, remove_definition
from .matmul_epilogue import ACTION as MATMUL_EPILOGUE

_RESULT_ALLOCATORS = ("torch.empty_like", "torch.empty")
# Tensor facts ``torch.empty_like(x)`` shares with ``x`` (not strides: a non-dense ``x`` gets dense ones).
_LIKE_ATTRS = {"numel", "shape", "dtype", "device", "size", "dim", "ndim"}
_ALLOCATING = {"torch.empty_like", "torch.empty", "torch.zeros_like", "torch.zeros", "torch.ones", "torch.ones_like",
               "torch.full", "torch.full_like", "torch.randn", "torch.rand", "torch.arange", "torch.tensor"}


@dataclass
class _Wrapper:
    """A host function that launches one kernel on its arguments and returns the tensor it allocated."""

    node: cst.FunctionDef
    kernel: str
    params: list[cst.Param]
    body: list[cst.SimpleStatementLine]  # the statements before ``return result``, docstring left out
    result: str
    assigned: list[str]
    free: set[str]  # names the body reads that it does not bind (module globals)


@dataclass
class _Site:
    """Where the composer feeds the producer's result to the consumer: two wrapper calls, or one wrapper call and a
    launch the composer writes itself (``add_kernel[grid](x, y, t, n, BLOCK=1024)`` then ``relu(t)``)."""

    host: cst.FunctionDef
    producer_kernel: str
    consumer_kernel: str
    producer: _Wrapper | None  # None: the composer launches the producer kernel itself
    consumer: _Wrapper | None  # None: the composer launches the consumer kernel itself
    producer_call: cst.Call | None  # the producer wrapper's call
    consumer_call: cst.Call | None  # the consumer wrapper's call, possibly inside an outer call
    producer_line: cst.SimpleStatementLine | None  # ``t = producer(...)`` or the producer's launch; None when nested
    consumer_line: cst.SimpleStatementLine  # the statement holding the consumer's call, or the consumer's launch


def _describe(site: _Site) -> str:
    """``relu(add(...))``, ``relu() of add_kernel's output`` or ``relu_kernel on add()'s result``."""
    if site.producer is not None and site.consumer is not None:
        return f"{site.consumer.node.name.value}({site.producer.node.name.value}(...))"
    if site.consumer is not None:
        return f"{site.consumer.node.name.value}() of {site.producer_kernel}'s output"
    return f"{site.consumer_kernel} on {site.producer.node.name.value}()'s result"


def _literal(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        node = node.expression
    return isinstance(node, cst.Integer | cst.Float | cst.SimpleString) or (
        isinstance(node, cst.Name) and node.value in ("True", "False", "None"))


def _bound_names(node: cst.CSTNode) -> set[str]:
    """Every name ``node`` binds anywhere inside (assignments, parameters, imports, nested defs), by Python's rules."""
    tree = ast.parse(textwrap.dedent(c.code(node).lstrip("\n")))
    out: set[str] = set()
    for sub in ast.walk(tree):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store | ast.Del):
            out.add(sub.id)
        elif isinstance(sub, ast.arg):
            out.add(sub.arg)
        elif isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(sub.name)
        elif isinstance(sub, ast.alias):
            out.add((sub.asname or sub.name).split(".")[0])
        elif isinstance(sub, ast.Global | ast.Nonlocal | ast.Yield | ast.YieldFrom | ast.Await):
            raise ActionError("the function uses global/nonlocal or is a generator or coroutine")
    return out


def _scoped_names(fn: cst.FunctionDef) -> set[str]:
    """Names bound by lambdas and comprehensions inside ``fn`` (their own scopes)."""
    tree = ast.parse(c.code(fn))
    out: set[str] = set()
    for sub in ast.walk(tree.body[0]):
        if isinstance(sub, ast.Lambda):
            out |= {a.arg for a in ast.walk(sub.args) if isinstance(a, ast.arg)}
        elif isinstance(sub, ast.comprehension):
            out |= {n.id for n in ast.walk(sub.target) if isinstance(n, ast.Name)}
    return out


def _single(statement: cst.CSTNode) -> cst.BaseSmallStatement | None:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        return statement.body[0]
    return None


def _assigned_name(small: cst.BaseSmallStatement | None) -> str | None:
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        return small.targets[0].target.value
    return None


def _unpacked_names(small: cst.BaseSmallStatement | None) -> list[str]:
    """The names ``a = ...`` or ``a, b = ...`` (``M, K = x.shape``) binds; empty for anything else."""
    single = _assigned_name(small)
    if single is not None:
        return [single]
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Tuple):
        elements = small.targets[0].target.elements
        if all(isinstance(e, cst.Element) and isinstance(e.value, cst.Name) for e in elements):
            return [e.value.value for e in elements]
    return []


def _wrapper(module: cst.Module, analysis: FileAnalysis, name: str) -> _Wrapper:
    """The top-level wrapper ``name``, or ActionError when it is not a plain one-launch wrapper."""
    defs = [s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == name]
    if len(defs) != 1 or analysis.kernel(name) is not None:
        raise ActionError(f"{name} is not one top-level host function")
    fn = defs[0]
    params = fn.params
    if fn.decorators or fn.asynchronous or params.posonly_params or params.kwonly_params \
            or not isinstance(params.star_arg, cst.MaybeSentinel) or params.star_kwarg is not None:
        raise ActionError(f"{name} has decorators, *args or keyword-only parameters")
    if any(p.default is not None and not _literal(p.default) for p in params.params):
        raise ActionError(f"{name} has a default that is not a literal")
    if not isinstance(fn.body, cst.IndentedBlock):
        raise ActionError(f"{name} is a one-line function")
    statements = list(fn.body.body)
    if statements and c.is_docstring(statements[0]):
        statements = statements[1:]
    if not statements or not isinstance(ret := _single(statements[-1]), cst.Return) or not isinstance(ret.value, cst.Name):
        raise ActionError(f"{name} does not end in `return <name>`")
    launches = [s for s in analysis.launches if s.host_function == name and s.file is None]
    if len(launches) != 1 or len(analysis.launches_of(launches[0].kernel)) != 1:
        raise ActionError(f"{name} does not launch exactly one kernel, or its kernel is launched elsewhere too")
    assigned: list[str] = []
    launch_lines = 0
    for statement in statements[:-1]:
        small = _single(statement)
        targets = _unpacked_names(small)
        if targets:
            assigned += targets
        elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and isinstance(small.value.func, cst.Subscript):
            launch_lines += 1
        elif not isinstance(small, cst.Assert):
            raise ActionError(f"{name} does more than assign names, assert and launch its kernel (branches, loops, other calls)")
    param_names = [p.name.value for p in params.params]
    if launch_lines != 1 or len(assigned) != len(set(assigned)) or set(assigned) & set(param_names):
        raise ActionError(f"{name} launches more than once or assigns a name twice")
    result = ret.value.value
    alloc = next((_single(s) for s in statements[:-1] if _assigned_name(_single(s)) == result), None)
    if alloc is None or not (isinstance(alloc.value, cst.Call) and c.code(alloc.value.func) in _RESULT_ALLOCATORS):
        raise ActionError(f"{name} does not return a tensor it allocated with torch.empty/empty_like")
    local = set(param_names) | set(assigned)
    if any(isinstance(sub, ast.NamedExpr) for sub in ast.walk(ast.parse(c.code(fn)))):
        raise ActionError(f"{name} binds a name inside an expression (:=)")
    if _scoped_names(fn) & local:
        raise ActionError(f"a lambda or comprehension in {name} reuses a local name")
    free = c.names_in(fn.body) - local - _bound_names(fn)
    return _Wrapper(fn, launches[0].kernel, list(params.params), list(statements[:-1]), result, assigned, free)


def _bind(wrapper: _Wrapper, call: cst.Call, produced: cst.Call | None, produced_name: str | None) -> dict[str, cst.BaseExpression]:
    """Wrapper parameter -> the expression the call passes (the nested producer call -> its result name)."""
    bound: dict[str, cst.BaseExpression] = {}
    names = [p.name.value for p in wrapper.params]
    positional = 0
    for arg in call.args:
        if arg.star:
            raise ActionError("the call unpacks *args or **kwargs")
        if arg.keyword is None:
            if positional >= len(names):
                raise ActionError("the call passes more arguments than the wrapper takes")
            param = names[positional]
            positional += 1
        else:
            param = arg.keyword.value
            if param not in names or param in bound:
                raise ActionError(f"the call passes {param} that the wrapper does not take")
        if produced is not None and arg.value is produced:
            bound[param] = cst.Name(produced_name)
        elif isinstance(arg.value, cst.Name) or _literal(arg.value):
            bound[param] = arg.value
        else:
            raise ActionError("an argument of the wrapper calls is not a name or a literal")
    for p in wrapper.params:
        if p.name.value not in bound:
            if p.default is None:
                raise ActionError(f"the call leaves {p.name.value} unbound")
            bound[p.name.value] = p.default
    return bound


def _fresh(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    return next(f"{name}_{i}" for i in range(1, 1000) if f"{name}_{i}" not in taken)


def _facts_of(value: cst.BaseExpression, known: dict[str, dict[str, str]]) -> dict[str, str] | None:
    """Which facts of a fresh allocation equal those of an older tensor: fact (``numel``, ..., ``like``) -> its name.

    ``torch.empty_like(b)`` shares all of b's (``like``: ``torch.empty_like`` of it is spelled alike, layout
    included); ``torch.empty(b.shape, device=b.device, dtype=b.dtype)`` shares b's shape, and its device and
    dtype where those are passed, but not its layout.
    """
    if not isinstance(value, cst.Call) or any(a.star for a in value.args):
        return None
    func = c.code(value.func)
    positional = [a.value for a in value.args if a.keyword is None]
    keywords = {a.keyword.value: c.code(a.value) for a in value.args if a.keyword is not None}
    if func == "torch.empty_like" and len(positional) == 1 and not keywords and isinstance(positional[0], cst.Name):
        source = positional[0].value
        older = known.get(source, {})
        return {fact: older.get(fact, source) for fact in (*_LIKE_ATTRS, "is_cuda", "like")}
    if func != "torch.empty" or len(positional) != 1 or set(keywords) - {"device", "dtype"}:
        return None
    shape = positional[0]
    if isinstance(shape, cst.Call) and isinstance(shape.func, cst.Attribute) and shape.func.attr.value == "size" and not shape.args:
        shape = shape.func  # ``b.size()`` is ``b.shape``
    if not (isinstance(shape, cst.Attribute) and shape.attr.value in ("shape", "size") and isinstance(shape.value, cst.Name)):
        return None
    source = shape.value.value
    older = known.get(source, {})
    facts = {fact: older.get(fact, source) for fact in ("numel", "shape", "size", "dim", "ndim")}
    for fact in ("device", "dtype"):
        if keywords.get(fact) == f"{source}.{fact}":
            facts[fact] = older.get(fact, source)
            if fact == "device":
                facts["is_cuda"] = older.get("is_cuda", source)
    return facts


def _like_roots(statements: list[cst.SimpleStatementLine]) -> dict[str, dict[str, str]]:
    """Each local allocated from another tensor's facts -> for each fact, the oldest tensor that has it."""
    known: dict[str, dict[str, str]] = {}
    for statement in statements:
        small = _single(statement)
        name = _assigned_name(small)
        if name is not None and (facts := _facts_of(small.value, known)) is not None:
            known[name] = facts
    return known


class _ReadLike(cst.CSTTransformer):
    """``buf.numel()``/``buf.shape``/``torch.empty_like(buf)`` -> the same of the older tensor that has the fact."""

    def __init__(self, roots: dict[str, dict[str, str]]):
        self.roots = roots

    def _root(self, node: cst.BaseExpression, fact: str) -> str | None:
        return self.roots.get(node.value, {}).get(fact) if isinstance(node, cst.Name) else None

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        root = self._root(updated_node.value, updated_node.attr.value) if updated_node.attr.value != "like" else None
        return updated_node.with_changes(value=cst.Name(root)) if root is not None else updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if not (c.code(updated_node.func) == "torch.empty_like" and len(updated_node.args) == 1 and updated_node.args[0].keyword is None):
            return updated_node
        source = updated_node.args[0].value
        if (root := self._root(source, "like")) is not None:
            return updated_node.with_changes(args=[updated_node.args[0].with_changes(value=cst.Name(root))])
        # ``t = torch.empty(x.shape, device=x.device, dtype=x.dtype)`` is dense: ``torch.empty_like(t)`` allocates the same.
        roots = {self._root(source, fact) for fact in ("shape", "device", "dtype")}
        if len(roots) == 1 and (root := roots.pop()) is not None:
            return c.expr(f"torch.empty({root}.shape, device={root}.device, dtype={root}.dtype)")
        return updated_node


def _shape_only(value: cst.BaseExpression) -> bool:
    """True for arithmetic on shapes that allocates nothing (what two equal spellings may share)."""
    return not c.contains(value, cst.Call, lambda call: c.code(call.func) in _ALLOCATING) and not _impure_calls(value)


class FuseCalls:
    name = "fuse_calls"
    kind = "Fusion"
    changes_numerics = False
    max_changed_lines = 40  # both wrappers go (most lines are removed ones) and the composer is rewritten

    def _sites(self, module: cst.Module, analysis: FileAnalysis) -> list[_Site]:
        """Every composition of a producer and a consumer where at least one is a one-launch wrapper call: nested
        (``relu(add(x, y))``, also inside an outer call), through one name, or a wrapper and a launch in the composer."""
        wrappers: dict[str, _Wrapper | None] = {}

        def wrapper(call: cst.BaseExpression) -> _Wrapper | None:
            if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name)):
                return None
            name = call.func.value
            if name not in wrappers:
                try:
                    wrappers[name] = _wrapper(module, analysis, name)
                except ActionError:
                    wrappers[name] = None
            return wrappers[name]

        sites = []
        for _qualname, host in _composers(module):
            if analysis.kernel(host.name.value) is not None or not isinstance(host.body, cst.IndentedBlock):
                continue
            body = list(host.body.body)
            for index, statement in enumerate(body):
                small = _single(statement)
                launched = _launched_kernel(small, analysis)
                if launched is not None:  # the composer launches the consumer; a wrapper may produce what it reads
                    for arg in small.value.args:
                        earlier = _assignment_before(body, index, arg.value) if isinstance(arg.value, cst.Name) else None
                        if earlier is not None and (producer := wrapper(earlier[1].value)) is not None:
                            sites.append(_Site(host, producer.kernel, launched, producer, None, earlier[1].value, None,
                                               earlier[0], statement))
                    continue
                value = small.value if isinstance(small, cst.Return) or _assigned_name(small) else None
                for call in _hoistable_calls(value):
                    consumer = wrapper(call)
                    if consumer is None:
                        continue
                    nested = [a.value for a in call.args if wrapper(a.value) is not None]
                    if len(nested) == 1:
                        producer = wrapper(nested[0])
                        sites.append(_Site(host, producer.kernel, consumer.kernel, producer, consumer, nested[0], call,
                                           None, statement))
                    if nested:
                        continue
                    for arg in call.args:
                        if not isinstance(arg.value, cst.Name):
                            continue
                        earlier = _assignment_before(body, index, arg.value)
                        if earlier is not None and c.count_name(host, arg.value.value) == 2 \
                                and (producer := wrapper(earlier[1].value)) is not None:
                            sites.append(_Site(host, producer.kernel, consumer.kernel, producer, consumer,
                                               earlier[1].value, call, earlier[0], statement))
                        elif (launch := _launch_passing(body[:index], arg.value.value, analysis)) is not None:
                            sites.append(_Site(host, launch[1], consumer.kernel, None, consumer, None, call, launch[0],
                                               statement))
        return [s for s in sites if s.producer_kernel != s.consumer_kernel]

    def _inline(self, module: cst.Module, site: _Site) -> tuple[cst.Module, dict[str, str]]:
        """The module with the wrapper calls inlined into the composer and those wrappers removed; renamed locals (new -> old)."""
        host, producer, consumer = site.host, site.producer, site.consumer
        inlined = [w for w in (producer, consumer) if w is not None]
        free = set().union(*(w.free for w in inlined))
        if free & _bound_names(host):
            raise ActionError(f"{host.name.value} rebinds a name the wrappers read")
        taken = c.names_in(host) | free
        once = bound_once(host)
        unstable = _bound_names(host) - once  # host names whose value changes somewhere
        renamed: dict[str, str] = {}

        def locals_of(w: _Wrapper, result_as: str | None) -> dict[str, cst.BaseExpression]:
            out = {}
            for old in w.assigned:
                new = result_as if old == w.result and result_as is not None else _fresh(old, taken)
                taken.add(new)
                if new != old and new != result_as:
                    renamed[new] = old
                out[old] = cst.Name(new)
            return out

        statements = list(host.body.body)
        p_body: list = []
        p_result = None
        if producer is not None:
            # ``t = producer(...)``: the producer's result is allocated as ``t`` itself, so no alias is left behind.
            target = _assigned_name(_single(site.producer_line)) if site.producer_line is not None else None
            if target is not None and target not in once:
                raise ActionError(f"{host.name.value} binds {target} more than once")
            p_map = {**_bind(producer, site.producer_call, None, None), **locals_of(producer, target)}
            p_body = [c.substitute_names(s, p_map) for s in producer.body]
            p_result = p_map[producer.result].value
        c_body: list = []
        final: list = []
        if consumer is not None:
            small = _single(site.consumer_line)
            target = _assigned_name(small)
            # ``u = consumer(...)`` with u bound once and not read by the call: the result is allocated as ``u``.
            result_as = target if target in once and small.value is site.consumer_call \
                and target not in c.names_in(site.consumer_call) else None
            nested = site.producer_call if site.producer_line is None else None
            c_map = {**_bind(consumer, site.consumer_call, nested, p_result), **locals_of(consumer, result_as)}
            c_body = [c.substitute_names(s, c_map) for s in consumer.body]
            if result_as is None:
                rest = site.consumer_line.deep_replace(site.consumer_call, cst.Name(c_map[consumer.result].value))
                final = [rest.with_changes(leading_lines=[])]
        replaced: list = []
        if producer is not None and consumer is not None:
            # What the composer rebinds between the two calls: shared spellings must read the same values.
            between: set[str] = set()
            if site.producer_line is not None:
                first, last = statements.index(site.producer_line), statements.index(site.consumer_line)
                for statement in statements[first + 1:last]:
                    between |= _bound_names(statement)
            # Shape queries of tensors allocated like another read that one (the tutorial's ``n = output.numel()``),
            # so both wrappers spell their sizes alike; a root the composer rebinds between the calls does not count.
            roots = _like_roots(p_body + c_body)
            p_body = [s.visit(_ReadLike(roots)) for s in p_body]
            c_roots = {name: {fact: root for fact, root in facts.items() if root not in between} for name, facts in roots.items()}
            c_body = [s.visit(_ReadLike(c_roots)) for s in c_body]
            c_body = self._share(_shape_definitions(p_body), c_body, between)
        elif consumer is not None:
            # The composer launched the producer: its own allocations and sizes, where bound once, are the facts.
            prefix = [s for s in statements[:statements.index(site.consumer_line)] if _stable_assignment(s, once, unstable)]
            roots = _like_roots(prefix + c_body)
            c_body = [s.visit(_ReadLike(roots)) for s in c_body]
            # The composer's own queries read the roots too (``n = t.numel()`` is ``x.numel()``): the buffer is then
            # named only where it is allocated and passed, and shared spellings compare alike.
            read_like = [s.visit(_ReadLike(roots)) for s in prefix]
            replaced += [(old, new) for old, new in zip(prefix, read_like) if not new.deep_equals(old)]
            c_body = self._share(_shape_definitions(read_like), c_body, set())
        else:
            # The composer launches the consumer: its later shape queries of ``t`` read what t was allocated from.
            first = statements.index(site.producer_line)
            earlier = [s for s in statements[:first] if _stable_assignment(s, once, unstable)]
            later = [s for s in statements[first + 1:] if _stable_assignment(s, once, unstable)]
            roots = {name: {fact: root for fact, root in facts.items() if root not in unstable}
                     for name, facts in _like_roots(earlier + p_body + later).items()}
            p_body = [s.visit(_ReadLike(roots)) for s in p_body]
            defined = _shape_definitions(p_body)
            mapping: dict[str, cst.BaseExpression] = {}
            for statement in statements[first + 1:]:
                new = c.substitute_names(statement, mapping)
                if isinstance(new, cst.SimpleStatementLine):
                    new = new.visit(_ReadLike(roots))
                small = _single(new)
                name = _assigned_name(small)
                twin = defined.get(c.code(small.value)) if name in once and _shape_only(small.value) \
                    and not c.names_in(small.value) & unstable else None
                if twin is not None:
                    mapping[name] = cst.Name(twin)
                    replaced.append((statement, cst.RemovalSentinel.REMOVE))
                elif new is not statement:
                    replaced.append((statement, new))
        if consumer is not None:
            c_body = _asserts_after_launch(c_body)
        lead = site.consumer_line.leading_lines
        if site.producer_line is None:
            replaced.append((site.consumer_line, cst.FlattenSentinel(_lead(p_body + c_body + final, lead))))
        else:
            if producer is not None:
                replaced.append((site.producer_line, cst.FlattenSentinel(_lead(p_body, site.producer_line.leading_lines))))
            if consumer is not None:
                replaced.append((site.consumer_line, cst.FlattenSentinel(_lead(c_body + final, lead))))
        module = c.replace_all(module, replaced)
        for w in inlined:
            count, index = _mentions(module, w.node.name.value)
            if count:
                raise ActionError(f"{w.node.name.value} is used elsewhere in the file; its kernel must stay as it is")
            module = remove_definition(module, index)
        if _mentions(module, site.producer_kernel)[0] != 1:
            raise ActionError(f"{site.producer_kernel} is named elsewhere in the file; changing it in place could break that use")
        return module, renamed

    @staticmethod
    def _share(defined: dict[str, str], c_body: list, between: set[str]) -> list:
        """The consumer's statements with each shape computation already made (``defined``: code -> name) replaced by that name."""
        out, mapping = [], {}
        for statement in c_body:
            statement = c.substitute_names(statement, mapping)
            small = _single(statement)
            name = _assigned_name(small)
            twin = defined.get(c.code(small.value)) if name is not None and _shape_only(small.value) else None
            if twin is not None and not (c.names_in(small.value) | {twin}) & between:
                mapping[name] = cst.Name(twin)
                continue
            out.append(statement)
        return out

    def _fused(self, text: str, module: cst.Module, site: _Site, target: GpuProfile) -> Edit:
        """The whole step: inline, then fuse the pair with ``fusion``, then give renamed locals their names back."""
        inlined, renamed = self._inline(module, site)
        inlined_text = inlined.code
        analysis = analyze(inlined_text)
        kernel = analysis.kernel(site.producer_kernel)
        if analysis.syntax_error is not None or kernel is None:
            raise ActionError("inlining the wrappers did not give a file fusion can read")
        fused = _fuse_pair(inlined_text, analysis, kernel, site.consumer_kernel, target)
        result = c.parse(fused.new_text)
        host_name = site.host.name.value
        qualname = next(q for q, fn in _composers(module) if fn is site.host)
        host = next(fn for q, fn in _composers(result) if q == qualname)
        present = c.names_in(host)
        back = {new: cst.Name(old) for new, old in renamed.items() if new in present and old not in present}
        if back:
            result = c.replace_all(result, [(host, c.substitute_names(host, back))])
        new_text = result.code
        names = [w.node.name.value for w in (site.producer, site.consumer) if w is not None]
        inlined_note = (f"inlined {' and '.join(n + '()' for n in names)} into {host_name} and removed "
                        f"{'both wrappers' if len(names) == 2 else 'the wrapper'} (nothing else in the file used "
                        f"{'them' if len(names) == 2 else 'it'})")
        notes = [inlined_note, *fused.notes]
        return Edit(new_text=new_text, changed_lines=changed_line_count(text, new_text),
                    summary=f"fused {_describe(site)} into one {site.producer_kernel} launch", notes=notes)

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        module = c.parse(analysis.text)
        out: list[Candidate] = []
        for site in self._sites(module, analysis):
            if kernel.name not in (site.producer_kernel, site.consumer_kernel):
                continue
            try:
                self._fused(analysis.text, module, site, target)  # an offered step must apply
            except ActionError:
                continue
            producer = analysis.kernel(site.producer_kernel)
            candidate = Candidate(
                self.name, self.kind, site.producer_kernel, {"consumer": site.consumer_kernel},
                f"Fuse {_describe(site)} in {site.host.name.value}: {site.consumer_kernel} folded into "
                f"{site.producer_kernel} (one launch, no buffer)",
                producer.calls_of("store")[0].span.start.line,
            )
            if candidate not in out:
                out.append(candidate)
        return out

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why no composition involving ``kernel`` fuses: each site's refusal, or that there is none."""
        module = c.parse(analysis.text)
        reasons = []
        for site in self._sites(module, analysis):
            if kernel.name in (site.producer_kernel, site.consumer_kernel):
                try:
                    self._fused(analysis.text, module, site, target)
                    return None
                except ActionError as exc:
                    reasons.append(f"{_describe(site)} in {site.host.name.value}: {exc}")
        return "; ".join(reasons) or ("no one-launch wrapper call composed with another, or with a launch, "
                                      f"involving {kernel.name}")

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        consumer = consumer_param(self.name, params)
        module = c.parse(text)
        sites = [s for s in self._sites(module, analysis) if s.producer_kernel == kernel.name and s.consumer_kernel == consumer]
        if len(sites) != 1:
            raise ActionError(f"no single composition of {kernel.name}'s wrapper or launch feeding {consumer}'s")
        return self._fused(text, module, sites[0], target)


def _fuse_pair(text: str, analysis: FileAnalysis, producer: Kernel, consumer: str, target: GpuProfile) -> Edit:
    """The inlined pair fused by the first fusion that applies: elementwise into elementwise (``fusion``), or an
    elementwise consumer into a matmul's epilogue (``matmul_epilogue``)."""
    errors = []
    for action in (FUSION, MATMUL_EPILOGUE):
        try:
            return action.apply(text, analysis, producer, {"consumer": consumer}, target)
        except ActionError as exc:
            errors.append(f"{action.name}: {exc}")
    raise ActionError("; ".join(errors))


def _composers(module: cst.Module) -> list[tuple[str, cst.FunctionDef]]:
    """(qualified name, function) of the functions that may compose wrapper calls: top-level functions and
    the methods of top-level classes (``ModelNew.forward``, an autograd ``forward``)."""
    out = []
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef):
            out.append((statement.name.value, statement))
        elif isinstance(statement, cst.ClassDef) and isinstance(statement.body, cst.IndentedBlock):
            out += [(f"{statement.name.value}.{s.name.value}", s) for s in statement.body.body if isinstance(s, cst.FunctionDef)]
    return out


def _stable_assignment(statement: cst.CSTNode, once: set[str], unstable: set[str]) -> bool:
    """``name = value`` where name is bound once and value reads no host name bound more than once."""
    small = _single(statement)
    name = _assigned_name(small)
    return name is not None and name in once and not c.names_in(small.value) & unstable


def _shape_definitions(statements: list) -> dict[str, str]:
    """Shape arithmetic the statements assign: its code -> the first name assigned it."""
    defined: dict[str, str] = {}
    for statement in statements:
        small = _single(statement)
        if (name := _assigned_name(small)) is not None and _shape_only(small.value):
            defined.setdefault(c.code(small.value), name)
    return defined


def _launched_kernel(small: cst.BaseSmallStatement | None, analysis: FileAnalysis) -> str | None:
    """The kernel a statement ``kernel[grid](...)`` launches, if it is one of the file's kernels."""
    if not (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and isinstance(small.value.func, cst.Subscript)):
        return None
    name = small.value.func.value
    return name.value if isinstance(name, cst.Name) and analysis.kernel(name.value) is not None else None


def _launch_passing(statements: list, name: str, analysis: FileAnalysis) -> tuple[cst.SimpleStatementLine, str] | None:
    """The last of ``statements`` that launches a kernel on the tensor ``name`` (passed as an argument): (it, its kernel)."""
    for statement in reversed(statements):
        small = _single(statement)
        kernel = _launched_kernel(small, analysis)
        if kernel is not None and any(isinstance(a.value, cst.Name) and a.value.value == name for a in small.value.args):
            return statement, kernel
    return None


def _assignment_before(body: list, index: int, name: cst.Name) -> tuple[cst.SimpleStatementLine, cst.Assign] | None:
    """The one statement before ``body[index]`` that assigns ``name`` (``t = ...``), or None."""
    earlier = [(s, _single(s)) for s in body[:index] if _assigned_name(_single(s)) == name.value]
    return earlier[0] if len(earlier) == 1 else None


def _hoistable_calls(value: cst.BaseExpression | None) -> list[cst.Call]:
    """Calls in ``value`` that may run before the rest of the statement: those with only names, literals and attribute
    lookups evaluated before them, found through call arguments, tuple items and operands (``gelu(mul(add(x, y), z))``:
    all three; ``relu(t), t`` and ``torch.sigmoid(relu(t)) * 2``: ``relu(t)``; ``f(x.add_(1), relu(t))``: none)."""
    out: list[cst.Call] = []
    if isinstance(value, cst.Tuple):
        parts = [e.value for e in value.elements]
        if not all(isinstance(e, cst.Element) for e in value.elements):
            return []  # a starred item
    elif isinstance(value, cst.BinaryOperation):
        parts = [value.left, value.right]
    elif isinstance(value, cst.UnaryOperation):
        parts = [value.expression]
    elif isinstance(value, cst.Call) and _dotted(value.func) and not any(a.star for a in value.args):
        parts, out = [a.value for a in value.args], [value]
    else:
        return []
    for part in parts:
        out += _hoistable_calls(part)
        if not (_dotted(part) or _literal(part)):
            break  # what follows is evaluated after this part: it cannot move in front of it
    return out


def _dotted(node: cst.BaseExpression) -> bool:
    """A name or an attribute of one (``x``, ``torch.sigmoid``): evaluating it only looks something up."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _pure_read(node: cst.CSTNode) -> bool:
    """True when evaluating ``node`` only reads: names, attributes, operators and shape queries (no other calls)."""

    def impure(call: cst.Call) -> bool:
        attr = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
        return attr != "is_contiguous" and _impure_calls(call.with_changes(args=[]))

    return not c.contains(node, cst.Call, impure)


def _asserts_after_launch(body: list) -> list:
    """The consumer's checks (``assert x.is_cuda``) moved right after its launch, so only assignments separate the launches.

    The producer's buffer is private and the checks only read (no calls but shape queries), so the same
    calls fail or pass; a failing check still raises before the function returns anything.
    """
    launch = next(i for i, st in enumerate(body) if isinstance(_single(st), cst.Expr))
    checks = [st for st in body[:launch] if isinstance(_single(st), cst.Assert)]
    if not checks:
        return body
    if not all(_pure_read(_single(st)) for st in checks):
        raise ActionError("the consumer wrapper asserts something that calls more than shape queries")
    rest = [st for st in body[:launch] if st not in checks]
    return [*rest, body[launch], *checks, *body[launch + 1:]]


def _lead(statements: list, leading: list) -> list:
    """``statements`` with the replaced statement's comments and blank lines in front of the first one."""
    if not statements or not leading:
        return statements
    return [statements[0].with_changes(leading_lines=[*leading, *statements[0].leading_lines]), *statements[1:]]


class _Mentions(cst.CSTVisitor):
    """How often code outside ``definition`` names ``name``: names read or bound, strings holding it as a word.

    Attribute names (``torch.relu`` is not the file's ``relu``) and docstrings do not count.
    """

    def __init__(self, definition: cst.FunctionDef, name: str):
        self.definition = definition
        self.word = re.compile(rf"(?<!\w){re.escape(name)}(?!\w)")
        self.name = name
        self.count = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is not self.definition

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Expr(self, node: cst.Expr) -> bool:
        return not isinstance(node.value, cst.SimpleString | cst.ConcatenatedString)  # a docstring documents, it does not refer

    def visit_Name(self, node: cst.Name) -> None:
        self.count += node.value == self.name

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.count += bool(self.word.search(node.value))

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
        self.count += bool(self.word.search(node.value))


def _mentions(module: cst.Module, name: str) -> tuple[int, int | None]:
    """(times the file names ``name`` outside its top-level definition, that definition's index)."""
    index = next((i for i, s in enumerate(module.body) if isinstance(s, cst.FunctionDef) and s.name.value == name), None)
    if index is None:
        raise ActionError(f"{name} is not defined at module level")
    mentions = _Mentions(module.body[index], name)
    module.visit(mentions)
    return mentions.count, index


ACTION = FuseCalls()
