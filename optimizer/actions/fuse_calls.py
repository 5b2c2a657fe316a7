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
the layout), and a consumer local that repeats a producer local's shape arithmetic (``n = x.numel()``)
reuses it.

Offered when each wrapper is a plain top-level function (no decorators, no ``*args``, literal
defaults only) whose straight-line body assigns names once, may assert, launches one kernel and ends
in ``return out`` of a tensor it allocated with ``torch.empty``/``torch.empty_like``; the consumer's
asserts (reads and shape queries only) move right after the fused launch; the calls are a ``return`` or
a single assignment in the composer's body (a top-level function, or a method such as ``ModelNew.forward``),
with names or literals as arguments; neither wrapper is
used anywhere else in the file (no other call, reference or string naming it) and the producer
kernel is named nowhere but in its wrapper, because the kernel is changed in place and both wrappers
are removed (a wrapper another caller still needs is refused, not copied). Everything fusion checks
then has to hold on the inlined function.

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
from .matmul_epilogue import ACTION as MATMUL_EPILOGUE
from .fusion import _impure_calls, remove_definition

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
    """Where the composer calls the consumer wrapper on the producer wrapper's result."""

    host: cst.FunctionDef
    producer: _Wrapper
    consumer: _Wrapper
    producer_call: cst.Call
    consumer_call: cst.Call
    producer_line: cst.SimpleStatementLine | None  # ``t = producer(...)``; None when the call is nested
    consumer_line: cst.SimpleStatementLine


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

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if c.code(updated_node.func) == "torch.empty_like" and len(updated_node.args) == 1 and updated_node.args[0].keyword is None \
                and (root := self._root(updated_node.args[0].value, "like")) is not None:
            return updated_node.with_changes(args=[updated_node.args[0].with_changes(value=cst.Name(root))])
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
        """Every composition ``consumer(producer(...))`` (nested or through one name) of two one-launch wrappers."""
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
                value = small.value if isinstance(small, cst.Return) or _assigned_name(small) else None
                consumer = wrapper(value)
                if consumer is None:
                    continue
                nested = [a.value for a in value.args if wrapper(a.value) is not None]
                if len(nested) == 1:
                    sites.append(_Site(host, wrapper(nested[0]), consumer, nested[0], value, None, statement))
                    continue
                for arg in value.args:
                    if not isinstance(arg.value, cst.Name) or c.count_name(host, arg.value.value) != 2:
                        continue
                    earlier = [(s, _single(s)) for s in body[:index] if _assigned_name(_single(s)) == arg.value.value]
                    if len(earlier) == 1 and (producer := wrapper(earlier[0][1].value)) is not None:
                        sites.append(_Site(host, producer, consumer, earlier[0][1].value, value, earlier[0][0], statement))
        return [s for s in sites if s.producer.kernel != s.consumer.kernel and s.producer.node is not s.consumer.node]

    def _inline(self, module: cst.Module, site: _Site) -> tuple[cst.Module, dict[str, str]]:
        """The module with both calls inlined into the composer and both wrappers removed; renamed locals (new -> old)."""
        host, producer, consumer = site.host, site.producer, site.consumer
        if (producer.free | consumer.free) & _bound_names(host):
            raise ActionError(f"{host.name.value} rebinds a name the wrappers read")
        taken = c.names_in(host) | producer.free | consumer.free
        renamed: dict[str, str] = {}

        def locals_of(w: _Wrapper) -> dict[str, cst.BaseExpression]:
            out = {}
            for old in w.assigned:
                new = _fresh(old, taken)
                taken.add(new)
                if new != old:
                    renamed[new] = old
                out[old] = cst.Name(new)
            return out

        p_map = {**_bind(producer, site.producer_call, None, None), **locals_of(producer)}
        p_body = [c.substitute_names(s, p_map) for s in producer.body]
        p_result = p_map[producer.result].value
        c_map = {**_bind(consumer, site.consumer_call, site.producer_call if site.producer_line is None else None, p_result),
                 **locals_of(consumer)}
        if site.producer_line is not None:  # ``t = producer(...)``: the consumer's ``t`` is the producer's result
            arg_name = next(a.value.value for a in site.consumer_call.args if isinstance(a.value, cst.Name)
                            and a.value.value == _assigned_name(_single(site.producer_line)))
            c_map = {k: (cst.Name(p_result) if isinstance(v, cst.Name) and v.value == arg_name else v) for k, v in c_map.items()}
        c_body = [c.substitute_names(s, c_map) for s in consumer.body]
        c_result = c_map[consumer.result].value
        # What the composer rebinds between the two calls: shared spellings must read the same values.
        statements = list(host.body.body)
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
        c_body = self._share(p_body, c_body, between)
        c_body = _asserts_after_launch(c_body)
        # The composer's statement: ``return r`` / ``x = r`` for the consumer's call.
        small = _single(site.consumer_line)
        final = site.consumer_line.with_changes(
            body=[small.with_changes(value=cst.Name(c_result))], leading_lines=[])
        lead = site.consumer_line.leading_lines
        if site.producer_line is None:
            replaced = [(site.consumer_line, cst.FlattenSentinel(_lead(p_body, lead) + c_body + [final]))]
        else:
            replaced = [(site.producer_line, cst.FlattenSentinel(_lead(p_body, site.producer_line.leading_lines))),
                        (site.consumer_line, cst.FlattenSentinel(_lead(c_body, lead) + [final]))]
        module = c.replace_all(module, replaced)
        for w in (producer, consumer):
            count, index = _mentions(module, w.node.name.value)
            if count:
                raise ActionError(f"{w.node.name.value} is used elsewhere in the file; its kernel must stay as it is")
            module = remove_definition(module, index)
        if _mentions(module, producer.kernel)[0] != 1:
            raise ActionError(f"{producer.kernel} is named elsewhere in the file; changing it in place could break that use")
        return module, renamed

    @staticmethod
    def _share(p_body: list, c_body: list, between: set[str]) -> list:
        """The consumer's statements with each shape computation the producer already made replaced by the producer's name."""
        defined = {}
        for statement in p_body:
            small = _single(statement)
            if (name := _assigned_name(small)) is not None and _shape_only(small.value):
                defined.setdefault(c.code(small.value), name)
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
        kernel = analysis.kernel(site.producer.kernel)
        if analysis.syntax_error is not None or kernel is None:
            raise ActionError("inlining the wrappers did not give a file fusion can read")
        fused = _fuse_pair(inlined_text, analysis, kernel, site.consumer.kernel, target)
        result = c.parse(fused.new_text)
        host_name = site.host.name.value
        qualname = next(q for q, fn in _composers(module) if fn is site.host)
        host = next(fn for q, fn in _composers(result) if q == qualname)
        present = c.names_in(host)
        back = {new: cst.Name(old) for new, old in renamed.items() if new in present and old not in present}
        if back:
            result = c.replace_all(result, [(host, c.substitute_names(host, back))])
        new_text = result.code
        inlined_note = (f"inlined {site.producer.node.name.value}() and {site.consumer.node.name.value}() into {host_name} "
                        "and removed both wrappers (nothing else in the file used them)")
        notes = [inlined_note, *fused.notes]
        return Edit(new_text=new_text, changed_lines=changed_line_count(text, new_text),
                    summary=f"fused {site.consumer.node.name.value}({site.producer.node.name.value}(...)) into one "
                            f"{site.producer.kernel} launch", notes=notes)

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        module = c.parse(analysis.text)
        out: list[Candidate] = []
        for site in self._sites(module, analysis):
            if kernel.name not in (site.producer.kernel, site.consumer.kernel):
                continue
            try:
                self._fused(analysis.text, module, site, target)  # an offered step must apply
            except ActionError:
                continue
            producer = analysis.kernel(site.producer.kernel)
            candidate = Candidate(
                self.name, self.kind, site.producer.kernel, {"consumer": site.consumer.kernel},
                f"Fuse {site.consumer.node.name.value}({site.producer.node.name.value}(...)) in "
                f"{site.host.name.value}: {site.consumer.kernel} folded into {site.producer.kernel} (one launch, no buffer)",
                producer.calls_of("store")[0].span.start.line,
            )
            if candidate not in out:
                out.append(candidate)
        return out

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        consumer = consumer_param(self.name, params)
        module = c.parse(text)
        sites = [s for s in self._sites(module, analysis) if s.producer.kernel == kernel.name and s.consumer.kernel == consumer]
        if len(sites) != 1:
            raise ActionError(f"no single composition of {kernel.name}'s wrapper feeding {consumer}'s wrapper")
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
