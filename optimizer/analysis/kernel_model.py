"""The symbolic model of a kernel: program ids, ``tl.arange`` axes, loops, and every access as an index expression.

Actions ask the model questions ("which program-id parts does this store's index read, and with what
stride?", "which axis does this reduction reduce?", "does the consumer load what the producer stored?")
instead of matching the statements that spell the answers. The model is built once per kernel from the
analysis's syntax tree (``Kernel.node``) by evaluating the body symbolically with sympy, whatever the spelling:
``pid % H`` and ``(pid // H) % S`` are ``Mod``/``floor`` terms over the program-id symbol, names bound in one
line and used in another are followed, pointer increments in a loop become the loop's trip count times the
increment. What it cannot follow (values loaded from memory, helper calls) becomes an opaque data symbol,
so an access whose index reads one is an ``indirect`` (gather/scatter) access, never a wrong affine one.

``kernel_model(analysis, kernel)`` is cached by the file's text; ``file_links(analysis)`` joins the kernels
of a file by the tensors one launch stores and a later launch of the same host function loads.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass, field
from functools import reduce

import sympy as sp

from .model import ATOMIC_OPS, REDUCTION_OPS, FileAnalysis, Kernel

# Calls whose result is their first argument, as far as indices go (hints and casts).
_PASS_THROUGH = frozenset({"multiple_of", "max_contiguous", "max_constancy", "to", "cast", "int64", "int32"})
_LOOP_CALLS = frozenset({"range", "tl.range", "tl.static_range"})
_CACHE_SIZE = 64


@dataclass(frozen=True)
class Arange:
    """One ``tl.arange(start, stop)``: its symbol runs over ``0 .. size-1``; the values are ``start + symbol``."""

    symbol: sp.Symbol
    start: sp.Expr
    size: sp.Expr  # ``stop - start``: a constexpr symbol, a number, or an expression of them
    name: str | None  # the local it was first bound to (``offs``), for messages
    line: int


@dataclass(frozen=True)
class LoopModel:
    """A ``for`` (or ``while``) loop: its variable, bounds, and the names it carries from one trip to the next."""

    var: sp.Symbol | None
    start: sp.Expr | None
    stop: sp.Expr | None
    step: sp.Expr | None
    kind: str  # "range" | "tl.range" | "tl.static_range" | "while" | "for"
    line: int
    depth: int
    carried: tuple[str, ...]  # bound before the loop, rebound in it and read in it (accumulators, pointers)
    trips: sp.Symbol  # the trip counter a pointer increment ``p += d`` is written with: ``p0 + trips * d``


@dataclass(frozen=True)
class Access:
    """A load, store or atomic: the tensor it reads or writes and the element index, as an expression."""

    op: str  # "load" | "store" | "atomic_add" | ...
    tensor: str | None  # the pointer parameter its address starts from; None when not known
    offset: sp.Expr | None  # element index from the tensor's base; None when the address is not understood
    dims: tuple[frozenset, ...]  # per tile dimension, the arange symbols that vary along it
    mask: str | None  # the mask's source text
    line: int
    loop_depth: int
    indirect: bool  # the index reads a value loaded from memory (a gather or scatter)
    bounds: tuple[tuple[sp.Expr, sp.Expr], ...] | None = ()  # the mask as ``a < b`` conjuncts; () unmasked, None unread
    block_pointer: bool = False
    source: str = field(default="", compare=False)  # the call as written (unparsed), for messages  # through ``tl.make_block_ptr`` / a tensor descriptor (offset not modelled)

    def stride(self, symbol: sp.Symbol) -> sp.Expr | None:
        """How far the index moves when ``symbol`` grows by one; None when that is not one constant step."""
        if self.offset is None:
            return None
        return linear_coefficient(self.offset, symbol)

    @property
    def symbols(self) -> set[sp.Symbol]:
        return set() if self.offset is None else set(self.offset.free_symbols)


@dataclass(frozen=True)
class Reduction:
    """``tl.sum(x, axis=1)`` and kin, and ``tl.dot``: which arange axes the result no longer varies along."""

    op: str
    axis: int | None  # None: every axis
    reduced: frozenset  # arange symbols summed (maxed, ...) away
    target: str | None  # the name assigned from it
    line: int


@dataclass(frozen=True)
class ProgramIdPart:
    """A name bound to a piece of a program id: ``head = pid % H``, ``pos = (pid // H) % S``, ``pid_m = tl.program_id(0)``."""

    name: str
    expr: sp.Expr  # over the program-id symbols ``pid0``, ``pid1``, ``pid2`` and kernel parameters
    axis: int


@dataclass
class LaunchModel:
    """One launch in the file: its grid, one expression per axis (host names as symbols), and the arguments."""

    grid: tuple[sp.Expr | None, ...] | None  # None: the grid could not be read
    args: dict[str, str]  # kernel parameter -> host source passed
    host_function: str | None
    line: int
    # Constexpr values this launch gives, one dict per autotune config it may run (one dict without autotune):
    # literals and host constants at the launch, kernel defaults, each config's kwargs over them.
    constexprs: list[dict[str, object]] = field(default_factory=list)


@dataclass
class KernelModel:
    """Everything an action asks about one kernel's iteration space and memory traffic."""

    name: str
    program_ids: dict[int, sp.Symbol]  # axis -> ``pid0`` ...
    parts: list[ProgramIdPart]
    aranges: dict[sp.Symbol, Arange]
    loops: list[LoopModel]
    accesses: list[Access]
    reductions: list[Reduction]
    bindings: dict[str, list["Binding"]]  # every name bound in the body, in order
    params: dict[str, sp.Symbol]
    pointers: frozenset[str]
    launches: list[LaunchModel] = field(default_factory=list)
    opaque: bool = False  # the body could not be read (no syntax tree)
    defaults: dict[str, sp.Expr] = field(default_factory=dict)  # parameter defaults that are numbers

    def loads(self) -> list[Access]:
        return [a for a in self.accesses if a.op == "load"]

    def stores(self) -> list[Access]:
        return [a for a in self.accesses if a.op != "load"]

    def program_id_symbols(self) -> set[sp.Symbol]:
        return set(self.program_ids.values())

    def reads_program_id(self, expr: sp.Expr | None, axis: int | None = None) -> bool:
        """Whether ``expr`` depends on a program id (``axis``: that one only)."""
        if expr is None:
            return False
        wanted = {self.program_ids[axis]} if axis is not None and axis in self.program_ids else self.program_id_symbols()
        return bool(expr.free_symbols & wanted)

    def program_terms(self, expr: sp.Expr, symbols: set | None = None) -> dict[sp.Expr, sp.Expr]:
        """The program-id pieces ``expr`` is affine in, each with its coefficient: ``{pid0 % H: D, floor(pid0/H): S*D}``.

        A piece is a program id itself or a ``floor``/``Mod`` of program ids (how authors split one flat id);
        the expression must be a sum of such pieces times factors free of program ids, plus a rest without them.
        Raises ``ValueError`` when it is not. ``symbols``: other index symbols instead (a grid-stride loop's row)."""
        pids = set(symbols) if symbols is not None else self.program_id_symbols()
        pieces = {node for node in sp.preorder_traversal(expr)
                  if isinstance(node, (sp.floor, sp.Mod)) and node.free_symbols & pids}
        pieces |= {s for s in expr.free_symbols & pids}
        # Outermost pieces only: ``Mod(floor(pid/H), S)`` is one piece, not also ``floor(pid/H)``.
        outer = {p for p in pieces if not any(p != q and p in q.args for q in pieces if q.has(p))}
        stand_ins = {p: sp.Symbol(f"_piece{i}", integer=True) for i, p in enumerate(sorted(outer, key=sp.default_sort_key))}
        flat = expr.xreplace(stand_ins)
        if flat.free_symbols & pids:
            raise ValueError(f"{expr} reads a program id outside floor/mod pieces")
        out = {}
        for piece, sym in stand_ins.items():
            coef = linear_coefficient(flat, sym)
            if coef is None or coef.free_symbols & set(stand_ins.values()):
                raise ValueError(f"{expr} is not affine in {piece}")
            if coef != 0:
                out[piece] = coef
        return out

    def pins(self, expr: sp.Expr | None, symbols: set) -> bool:
        """Whether ``expr`` determines the index that ``symbols`` stand for: it reads one of them affinely, or both
        ``x // D`` and ``x % D`` of an ``x`` it determines (``token = pid // H``, ``head = pid % H``; ``pid // (H * S)``
        counts as ``(pid // H) // S``). A ``min``/``max`` of the index determines nothing."""
        if expr is None:
            return False
        try:
            known = {piece for piece, coef in self.program_terms(expr, symbols).items() if coef != 0}
        except ValueError:
            return False
        grown = True
        while grown and not known & set(symbols):
            grown = False
            for piece in [p for p in known if isinstance(p, sp.floor)]:
                x, d = piece.args[0].as_numer_denom()
                for other in [p for p in known if isinstance(p, sp.Mod)]:
                    y, b = other.args
                    # ``y % b`` with ``y = x // a`` and ``a * b = d``: ``x // d`` is ``y // b``.
                    y_x, a = y.args[0].as_numer_denom() if isinstance(y, sp.floor) else (None, None)
                    same = (y == x and b == d) or (y_x == x and sp.simplify(a * b - d) == 0)
                    if same and y not in known:
                        known.add(y)
                        grown = True
                if any(isinstance(m, sp.Mod) and m.args == (x, d) for m in known) and x not in known:
                    known.add(x)
                    grown = True
        return bool(known & set(symbols))

    def flat_block(self, access: Access) -> tuple[sp.Expr, sp.Expr] | None:
        """(block, bound) when ``access`` reads one block per program, ``program_id(0) * B + tl.arange(0, B)``,
        masked by ``< bound`` and nothing else (a flat elementwise kernel's indexing, however spelled); else None."""
        if access.offset is None or access.indirect or len(self.program_ids) != 1 or not access.bounds \
                or len(access.bounds) != 1 or access.bounds[0][0] != access.offset:
            return None
        try:
            terms = self.program_terms(access.offset)
        except ValueError:
            return None
        if len(terms) != 1:
            return None
        (pid, block), = terms.items()
        lanes = access.offset - block * pid
        if pid not in self.program_id_symbols() or lanes not in self.aranges or self.aranges[lanes].start != 0 \
                or self.aranges[lanes].size != block:
            return None
        return block, access.bounds[0][1]

    def in_host_terms(self, expr: sp.Expr | None, launch: LaunchModel | None = None) -> sp.Expr | None:
        """``expr`` over what a launch passes: each parameter replaced by the host expression the launch gives it
        (its default when not passed), each arange by its start and size, so that two kernels launched from one host
        function compare by meaning (``offs`` of one is ``offsets`` of the other when both read ``x.numel()``)."""
        if expr is None:
            return None
        launch = launch or (self.launches[0] if self.launches else None)
        mapping: dict[sp.Symbol, sp.Expr] = {}
        for name, symbol in self.params.items():
            source = launch.args.get(name) if launch is not None else None
            value = _host_expr(source) if source is not None else self.defaults.get(name)
            mapping[symbol] = value if value is not None else sp.Symbol(f"{name}?", integer=True)
        for arange in self.aranges.values():
            start, size = arange.start.xreplace(mapping), arange.size.xreplace(mapping)
            mapping[arange.symbol] = sp.Symbol(f"arange[{sp.srepr(start)}:{sp.srepr(size)}]", integer=True)
        return sp.expand(expr.xreplace(mapping))

    def bounds_in_host_terms(self, bounds, launch: LaunchModel | None = None):
        """A mask's conjuncts in host terms (``in_host_terms``), as a set; None when the mask is not understood."""
        if bounds is None:
            return None
        return frozenset((self.in_host_terms(a, launch), self.in_host_terms(b, launch)) for a, b in bounds)

    def arange_of(self, name: str) -> Arange | None:
        """The arange a name was first bound to (``offs = pid * B + tl.arange(0, B)`` -> that arange)."""
        return next((a for a in self.aranges.values() if a.name == name), None)

    def single_binding(self, name: str) -> "Binding | None":
        found = self.bindings.get(name, [])
        return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class Binding:
    """``name = value`` in the body: the value as an expression, where, and at which loop depth."""

    expr: sp.Expr | None
    line: int
    top_level: bool  # a statement of the body itself, not inside a loop or branch
    statement: ast.stmt = field(repr=False, compare=False)
    bounds: tuple[tuple[sp.Expr, sp.Expr], ...] | None = None  # a mask's ``a < b`` conjuncts
    rank: int = 0  # the value's tile rank: 1 for ``tl.arange(0, B)``, 2 once ``[:, None]`` expands it


@dataclass(frozen=True)
class Link:
    """A launch stores a tensor that a later launch of the same host function loads: producer -> consumer."""

    buffer: str  # the host name passed to both
    producer: str
    store: Access
    consumer: str
    load: Access
    host_function: str | None


def linear_coefficient(expr: sp.Expr, symbol: sp.Symbol) -> sp.Expr | None:
    """The coefficient of ``symbol`` in ``expr`` when ``expr`` is affine in it (``floor``/``Mod`` of it are not); else None."""
    if symbol not in expr.free_symbols:
        return sp.Integer(0)
    coef = sp.expand(sp.diff(expr, symbol))
    if symbol in coef.free_symbols or coef.has(sp.Derivative) or coef.has(sp.Subs):
        return None
    if any(isinstance(n, (sp.floor, sp.Mod, sp.ceiling)) and symbol in n.free_symbols for n in sp.preorder_traversal(expr)):
        return None
    return coef


# --- evaluation -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Val:
    """A value during evaluation: an index expression (None: not an index) and its tile layout."""

    expr: sp.Expr | None
    dims: tuple[frozenset, ...] = ()
    bounds: tuple[tuple[sp.Expr, sp.Expr], ...] | None = None  # a mask: ``a < b`` conjuncts (None: not one)


def _broadcast(*dims: tuple[frozenset, ...]) -> tuple[frozenset, ...]:
    rank = max((len(d) for d in dims), default=0)
    padded = [(frozenset(),) * (rank - len(d)) + tuple(d) for d in dims]
    return tuple(reduce(frozenset.union, column, frozenset()) for column in zip(*padded)) if rank else ()


class _Builder:
    """Walks a kernel body once, binding names to ``_Val`` and recording accesses, loops and reductions."""

    def __init__(self, analysis: FileAnalysis, kernel: Kernel):
        self.names = analysis.names
        self.kernel = kernel
        self.params = {p.name: sp.Symbol(p.name, integer=True) for p in kernel.params}
        self.pointers = frozenset(p.name for p in kernel.params if p.kind == "pointer")
        self.constexprs = frozenset(p.name for p in kernel.params if p.kind == "constexpr")
        self.env: dict[str, _Val] = {name: _Val(sym) for name, sym in self.params.items()}
        self.program_ids: dict[int, sp.Symbol] = {}
        self.parts: list[ProgramIdPart] = []
        self.aranges: dict[sp.Symbol, Arange] = {}
        self.loops: list[LoopModel] = []
        self.accesses: list[Access] = []
        self.reductions: list[Reduction] = []
        self.bindings: dict[str, list[Binding]] = {}
        self.counter = itertools.count()
        self.block_pointer_tensors: dict[sp.Expr, str | None] = {}  # ``tl.make_block_ptr`` results -> tensor
        self.depth = 0
        self.branch = 0

    # names
    def fresh(self, stem: str) -> sp.Symbol:
        return sp.Symbol(f"{stem}{next(self.counter)}", integer=True)

    def data(self, dims: tuple[frozenset, ...] = ()) -> _Val:
        """A value loaded or computed from data: opaque to index reasoning, but with a layout."""
        return _Val(self.fresh("_data"), dims)

    def op(self, call: ast.Call) -> str | None:
        return self.names.tl_op(call.func)

    # statements
    def block(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self.statement(statement)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple) \
                and isinstance(node.value, ast.Tuple) and len(node.value.elts) == len(node.targets[0].elts):
            values = [self.expr(v) for v in node.value.elts]  # ``i_t, i_v = tl.program_id(0), tl.program_id(1)``
            for target, value in zip(node.targets[0].elts, values):
                self.bind(target, value, node)
        elif isinstance(node, ast.Assign):
            value = self.expr(node.value)
            for target in node.targets:
                self.bind(target, value, node)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self.bind(node.target, self.expr(node.value), node)
        elif isinstance(node, ast.AugAssign):
            current = self.expr(node.target) if isinstance(node.target, ast.Name) else _Val(None)
            self.bind(node.target, self.binary(node.op, current, self.expr(node.value)), node)
        elif isinstance(node, ast.Expr):
            self.expr(node.value)
        elif isinstance(node, ast.For):
            self.for_loop(node)
        elif isinstance(node, ast.While):
            self.while_loop(node)
        elif isinstance(node, ast.If):
            self.expr(node.test)
            self.branches([node.body, node.orelse])
        elif isinstance(node, ast.With):
            self.block(node.body)
        elif isinstance(node, ast.Return) and node.value is not None:
            self.expr(node.value)

    def bind(self, target: ast.expr, value: _Val, statement: ast.stmt) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
            top = self.depth == 0 and self.branch == 0
            binding = Binding(value.expr, statement.lineno - 1, top, statement, value.bounds, len(value.dims))
            self.bindings.setdefault(target.id, []).append(binding)
            if value.expr is not None:
                self.note_part(target.id, value.expr)
                for arange in list(self.aranges.values()):
                    if arange.name is None and value.expr == arange.start + arange.symbol:
                        self.aranges[arange.symbol] = Arange(arange.symbol, arange.start, arange.size, target.id, arange.line)
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:  # ``a, b = f(...)``: not followed
                self.bind(element, _Val(None), statement)

    def note_part(self, name: str, expr: sp.Expr) -> None:
        pids = set(self.program_ids.values())
        if expr.free_symbols & pids and (expr in pids or isinstance(expr, (sp.floor, sp.Mod))):
            axis = next(a for a, s in self.program_ids.items() if s in expr.free_symbols)
            self.parts.append(ProgramIdPart(name, expr, axis))

    def branches(self, bodies: list[list[ast.stmt]]) -> None:
        """Both arms of an ``if``: names they bind differently are no longer known after it."""
        before = dict(self.env)
        results = []
        self.branch += 1
        for body in bodies:
            self.env = dict(before)
            self.block(body)
            results.append(self.env)
        self.branch -= 1
        merged = dict(before)
        for name in set().union(*results):
            values = [r.get(name) for r in results]
            merged[name] = values[0] if all(v == values[0] for v in values) and values[0] is not None else _Val(None)
        self.env = merged

    def assigned_in(self, statements: list[ast.stmt]) -> dict[str, list[ast.stmt]]:
        out: dict[str, list[ast.stmt]] = {}
        for node in statements:
            for sub in ast.walk(node):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] if isinstance(
                    sub, ast.AugAssign | ast.AnnAssign | ast.For) else []
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            out.setdefault(n.id, []).append(sub)
        return out

    def for_loop(self, node: ast.For) -> None:
        var = node.target.id if isinstance(node.target, ast.Name) else None
        kind, start, stop, step = "for", None, None, None
        if isinstance(node.iter, ast.Call):
            func = node.iter.func
            kind = ("range" if isinstance(func, ast.Name) and func.id == "range"
                    else f"tl.{self.op(node.iter)}" if self.op(node.iter) in ("range", "static_range") else "for")
            if kind in _LOOP_CALLS:
                args = [self.expr(a).expr for a in node.iter.args[:3]]
                step_kw = next((k.value for k in node.iter.keywords if k.arg == "step"), None)
                if len(args) == 1:
                    start, stop, step = sp.Integer(0), args[0], sp.Integer(1)
                elif len(args) >= 2:
                    start, stop = args[0], args[1]
                    step = args[2] if len(args) == 3 else (self.expr(step_kw).expr if step_kw is not None else sp.Integer(1))
        self.loop(node, node.body, var, kind, start, stop, step)

    def while_loop(self, node: ast.While) -> None:
        self.loop(node, node.body, None, "while", None, None, None)

    def loop(self, node: ast.stmt, body: list[ast.stmt], var: str | None, kind: str, start, stop, step) -> None:
        assigned = self.assigned_in(body)
        carried = tuple(sorted(n for n in _read_before_written(body) if n in assigned and n in self.env and n != var))
        trips = self.fresh("_trips")
        symbol = sp.Symbol(var, integer=True) if var else None
        before = dict(self.env)
        # A name the loop only moves by a loop-invariant step (``a_ptrs += BLOCK_K * stride_ak``) is
        # ``initial + trips * step`` inside it; anything else it rebinds is unknown at the top of a trip.
        for name in carried:
            statements = assigned[name]
            step_of, advanced = None, False
            if len(statements) == 1:
                step = _pointer_step(statements[0], name, self.names)
                advanced = step == "advance"
                if isinstance(step, ast.expr) and not (
                        {n.id for n in ast.walk(step) if isinstance(n, ast.Name)} & set(assigned)):
                    step_of = self.expr(step).expr
            initial = before[name]
            if advanced and initial.expr is not None and initial.expr not in self.block_pointer_tensors:
                # ``p = tl.advance(p, ...)`` of a block pointer passed in (a helper's parameter): that tensor's block
                self.block_pointer_tensors[initial.expr] = self.pointer_parts(initial)[0]
            if initial.expr in self.block_pointer_tensors:  # ``p = tl.advance(p, ...)``: still that tensor's block
                continue
            if step_of is not None and initial.expr is not None:
                self.env[name] = _Val(initial.expr + trips * step_of, initial.dims)
            else:
                self.env[name] = _Val(None, initial.dims)
        if symbol is not None:
            self.env[var] = _Val(symbol)
        for name in assigned:  # names first bound in the loop and read before their binding there
            if name not in before and name != var:
                self.env.pop(name, None)
        self.loops.append(LoopModel(symbol, start, stop, step, kind, node.lineno - 1, self.depth + 1, carried, trips))
        self.depth += 1
        self.block(body)
        self.depth -= 1
        for name in assigned:  # after the loop: the last trip's values, not an expression of the loop variable
            if name in self.env and self.env[name].expr not in self.block_pointer_tensors:
                self.env[name] = _Val(None, self.env[name].dims)

    # expressions
    def expr(self, node: ast.expr) -> _Val:
        try:
            return self._expr(node)
        except (TypeError, ValueError, ZeroDivisionError, AttributeError, RecursionError):
            return _Val(None)

    def _expr(self, node: ast.expr) -> _Val:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                return _Val(None)
            return _Val(sp.Integer(node.value) if isinstance(node.value, int) else sp.Float(node.value))
        if isinstance(node, ast.Name):
            return self.env.get(node.id, _Val(None))
        if isinstance(node, ast.BinOp):
            return self.binary(node.op, self.expr(node.left), self.expr(node.right))
        if isinstance(node, ast.UnaryOp):
            inner = self.expr(node.operand)
            if isinstance(node.op, ast.USub) and inner.expr is not None:
                return _Val(-inner.expr, inner.dims)
            return _Val(inner.expr if isinstance(node.op, ast.UAdd) else None, inner.dims)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Compare | ast.BoolOp):
            parts = [self.expr(n) for n in ([node.left, *node.comparators] if isinstance(node, ast.Compare) else node.values)]
            dims = _broadcast(*(p.dims for p in parts))
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and all(p.expr is not None for p in parts):
                (a, b), op = (p.expr for p in parts), node.ops[0]
                bound = {ast.Lt: (a, b), ast.Gt: (b, a), ast.LtE: (a, b + 1), ast.GtE: (b, a + 1)}.get(type(op))
                return _Val(None, dims, (bound,) if bound else None)
            if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And) and all(p.bounds is not None for p in parts):
                return _Val(None, dims, tuple(b for p in parts for b in p.bounds))
            return _Val(None, dims)
        if isinstance(node, ast.IfExp):
            self.expr(node.test)
            a, b = self.expr(node.body), self.expr(node.orelse)
            return a if a == b else _Val(None, _broadcast(a.dims, b.dims))
        if isinstance(node, ast.Attribute):
            base = self.expr(node.value)
            return _Val(None, base.dims[::-1] if node.attr == "T" else base.dims)
        if isinstance(node, ast.Tuple | ast.List):
            for element in node.elts:
                self.expr(element)
            return _Val(None)
        return _Val(None)

    def binary(self, op: ast.operator, a: _Val, b: _Val) -> _Val:
        dims = _broadcast(a.dims, b.dims)
        if isinstance(op, ast.BitAnd) and a.bounds is not None and b.bounds is not None:
            return _Val(None, dims, a.bounds + b.bounds)  # ``(rm[:, None] < M) & (rn[None, :] < N)``
        if a.expr is None or b.expr is None:
            return self.data(dims) if (a.expr is not None or b.expr is not None) else _Val(None, dims)
        x, y = a.expr, b.expr
        if isinstance(op, ast.Add):
            return _Val(x + y, dims)
        if isinstance(op, ast.Sub):
            return _Val(x - y, dims)
        if isinstance(op, ast.Mult):
            return _Val(x * y, dims)
        if isinstance(op, ast.FloorDiv):
            return _Val(sp.floor(x / y), dims)
        if isinstance(op, ast.Mod):
            return _Val(sp.Mod(x, y), dims)
        if isinstance(op, ast.Div):
            return _Val(x / y, dims)
        if isinstance(op, ast.LShift) and y.is_Integer:
            return _Val(x * 2 ** int(y), dims)
        return self.data(dims)

    def subscript(self, node: ast.Subscript) -> _Val:
        base = self.expr(node.value)
        index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if all(isinstance(i, ast.Slice) or (isinstance(i, ast.Constant) and i.value is None) for i in index):
            source = iter(base.dims)
            dims = tuple(next(source, frozenset()) if isinstance(i, ast.Slice) else frozenset() for i in index)
            return _Val(base.expr, dims, base.bounds)
        return self.data()

    def call(self, node: ast.Call) -> _Val:
        op = self.op(node)
        args = node.args
        kwargs = {k.arg: k.value for k in node.keywords if k.arg}
        if op is None and isinstance(node.func, ast.Attribute) and node.func.attr in _PASS_THROUGH:
            return self.expr(node.func.value)  # ``x.to(tl.int64)``
        if op is None and isinstance(node.func, ast.Name) and node.func.id in ("min", "max") and len(args) == 2:
            a, b = self.expr(args[0]), self.expr(args[1])
            if a.expr is not None and b.expr is not None:
                return _Val((sp.Min if node.func.id == "min" else sp.Max)(a.expr, b.expr), _broadcast(a.dims, b.dims))
        if op == "program_id":
            axis_node = args[0] if args else kwargs.get("axis")
            axis = axis_node.value if isinstance(axis_node, ast.Constant) and isinstance(axis_node.value, int) else None
            if axis is None:
                return _Val(None)
            return _Val(self.program_ids.setdefault(axis, sp.Symbol(f"pid{axis}", integer=True, nonnegative=True)))
        if op == "num_programs":
            axis_node = args[0] if args else kwargs.get("axis")
            axis = axis_node.value if isinstance(axis_node, ast.Constant) else "?"
            return _Val(sp.Symbol(f"num_programs{axis}", integer=True, positive=True))
        if op == "arange" and len(args) == 2:
            start, stop = self.expr(args[0]).expr, self.expr(args[1]).expr
            if start is None or stop is None:
                return self.data((frozenset(),))
            symbol = self.fresh("_ar")
            self.aranges[symbol] = Arange(symbol, start, stop - start, None, node.lineno - 1)
            return _Val(start + symbol, (frozenset({symbol}),))
        if op in _PASS_THROUGH and args:
            for extra in args[1:]:
                self.expr(extra)
            return self.expr(args[0])
        if op == "cdiv" and len(args) == 2:
            a, b = self.expr(args[0]).expr, self.expr(args[1]).expr
            return _Val(sp.ceiling(a / b)) if a is not None and b is not None else _Val(None)
        if op in ("minimum", "maximum") and len(args) == 2:
            a, b = self.expr(args[0]), self.expr(args[1])
            if a.expr is not None and b.expr is not None:
                return _Val((sp.Min if op == "minimum" else sp.Max)(a.expr, b.expr), _broadcast(a.dims, b.dims))
            return self.data(_broadcast(a.dims, b.dims))
        if op in ("load", "store") or op in ATOMIC_OPS:
            return self.access(node, op, args, kwargs)
        if op in ("make_block_ptr", "make_tensor_descriptor"):
            return self.block_pointer(node, op, args, kwargs)
        if op in ("advance",) and args:
            return self.expr(args[0])
        if op in REDUCTION_OPS:
            return self.reduction(node, op, args, kwargs)
        if op == "dot" and len(args) >= 2:
            a, b = self.expr(args[0]), self.expr(args[1])
            for extra in args[2:]:
                self.expr(extra)
            reduced = (a.dims[-1] if a.dims else frozenset()) | (b.dims[-2] if len(b.dims) >= 2 else frozenset())
            self.reductions.append(Reduction("dot", -1, reduced, None, node.lineno - 1))
            rows = a.dims[-2] if len(a.dims) >= 2 else frozenset()
            cols = b.dims[-1] if b.dims else frozenset()
            return self.data((rows, cols))
        if op in ("zeros", "full"):
            return self.data(self.shape_dims(args[0] if args else kwargs.get("shape")))
        if op == "trans" and args:
            inner = self.expr(args[0])
            return _Val(None if inner.expr is None else inner.expr, inner.dims[::-1])
        if op in ("reshape", "view", "broadcast_to", "expand_dims", "permute", "join", "split", "interleave"):
            for a in args:
                self.expr(a)
            return self.data()
        # elementwise math (``tl.exp``, ``tl.where``), helper calls, methods: data with the broadcast layout
        values = [self.expr(a) for a in args] + [self.expr(v) for v in kwargs.values()]
        if op is None and isinstance(node.func, ast.Attribute):
            values.append(self.expr(node.func.value))
        return self.data(_broadcast(*(v.dims for v in values)))

    def shape_dims(self, shape: ast.expr | None) -> tuple[frozenset, ...]:
        if isinstance(shape, ast.Tuple | ast.List):
            return tuple(frozenset() for _ in shape.elts)
        return (frozenset(),)

    def pointer_parts(self, value: _Val) -> tuple[str | None, sp.Expr | None, bool]:
        """(the pointer parameter, the element offset from it, whether the offset reads loaded data)."""
        if value.expr is None:
            return None, None, False
        expr = sp.expand(value.expr)
        bases = [name for name in self.pointers if self.params[name] in expr.free_symbols]
        if not bases:  # a pointer the analysis did not type (``X`` without ``_ptr``): the one parameter added once
            bases = [name for name, symbol in self.params.items() if name not in self.constexprs
                     and linear_coefficient(expr, symbol) == 1]
        if len(bases) != 1:
            return None, None, False
        base = self.params[bases[0]]
        offset = sp.expand(expr - base)
        if base in offset.free_symbols:
            return bases[0], None, False
        indirect = any(s.name.startswith("_data") for s in offset.free_symbols)
        return bases[0], offset, indirect

    def access(self, node: ast.Call, op: str, args: list[ast.expr], kwargs: dict[str, ast.expr]) -> _Val:
        pointer_node = args[0] if args else kwargs.get("pointer")
        pointer = self.expr(pointer_node) if pointer_node is not None else _Val(None)
        mask_node = kwargs.get("mask")
        if mask_node is None:
            mask_index = 1 if op == "load" else 2
            mask_node = args[mask_index] if len(args) > mask_index else None
        mask = self.expr(mask_node) if mask_node is not None else _Val(None, (), ())
        for extra in list(args[1:]) + list(kwargs.values()):
            if extra is not mask_node:
                self.expr(extra)
        block = pointer.expr in self.block_pointer_tensors
        tensor, offset, indirect = (self.block_pointer_tensors[pointer.expr], None, False) if block \
            else self.pointer_parts(pointer)
        self.accesses.append(Access(
            op, tensor, offset, pointer.dims, ast.unparse(mask_node) if mask_node is not None else None,
            node.lineno - 1, self.depth, indirect, mask.bounds, block_pointer=block, source=ast.unparse(node)))
        return self.data(pointer.dims) if op != "store" else _Val(None)

    def block_pointer(self, node: ast.Call, op: str, args: list[ast.expr], kwargs: dict[str, ast.expr]) -> _Val:
        base = args[0] if args else kwargs.get("base")
        for extra in list(args[1:]) + list(kwargs.values()):
            self.expr(extra)
        value = self.data()
        # ``tl.make_block_ptr(base=Q + q_offset, ...)``: the tensor is the pointer parameter the base starts from.
        tensor = self.pointer_parts(self.expr(base))[0] if base is not None else None
        self.block_pointer_tensors[value.expr] = tensor
        return value

    def reduction(self, node: ast.Call, op: str, args: list[ast.expr], kwargs: dict[str, ast.expr]) -> _Val:
        operand = self.expr(args[0]) if args else _Val(None)
        axis_node = kwargs.get("axis", args[1] if len(args) > 1 else None)
        axis = axis_node.value if isinstance(axis_node, ast.Constant) and isinstance(axis_node.value, int) else None
        if isinstance(axis_node, ast.UnaryOp) and isinstance(axis_node.operand, ast.Constant):
            axis = -axis_node.operand.value
        dims = operand.dims
        if axis is None:
            reduced, kept = reduce(frozenset.union, dims, frozenset()), ()
        elif -len(dims) <= axis < len(dims):
            reduced, kept = dims[axis], dims[:axis % len(dims)] + dims[axis % len(dims) + 1:]
        else:
            reduced, kept = frozenset(), dims
        if kwargs.get("keep_dims") is not None and isinstance(kwargs["keep_dims"], ast.Constant) and kwargs["keep_dims"].value:
            kept = tuple(frozenset() if i == (axis or 0) % max(len(dims), 1) else d for i, d in enumerate(dims))
        self.reductions.append(Reduction(op, axis, reduced, None, node.lineno - 1))
        return self.data(kept)


def _pointer_step(statement: ast.stmt, name: str, names) -> ast.expr | str | None:
    """How a loop moves ``name``: the step ``d`` of ``name += d`` or ``name = name + d``, "advance" for
    ``name = tl.advance(name, ...)``, None for anything else."""
    if isinstance(statement, ast.AugAssign) and isinstance(statement.op, ast.Add):
        return statement.value
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        value = statement.value
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
            for own, step in ((value.left, value.right), (value.right, value.left)):
                if isinstance(own, ast.Name) and own.id == name:
                    return step
        if isinstance(value, ast.Call) and names.tl_op(value.func) == "advance" and value.args \
                and isinstance(value.args[0], ast.Name) and value.args[0].id == name:
            return "advance"
    return None


def _read_before_written(body: list[ast.stmt]) -> set[str]:
    """Names a loop body reads before it binds them in the same trip: what one trip hands the next."""
    written: set[str] = set()
    early: set[str] = set()
    for statement in body:
        value_nodes = [statement.value] if isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value else [statement]
        reads = {n.id for v in value_nodes for n in ast.walk(v) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name):
            reads.add(statement.target.id)
        early |= reads - written
        if isinstance(statement, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            written |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return early


# --- launches and links ------------------------------------------------------------------------------------


def _host_expr(source: str) -> sp.Expr | None:
    """A host expression (``triton.cdiv(n, 1024)``, ``B * H``, ``META["BLOCK"]``) with host names as symbols."""
    try:
        node = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None
    return _host(node)


def _host(node: ast.expr) -> sp.Expr | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return sp.Integer(node.value)
    if isinstance(node, ast.Name):
        return sp.Symbol(node.id, integer=True)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return sp.Symbol(node.slice.value, integer=True)  # ``META["BLOCK"]``: the constexpr itself
    if isinstance(node, ast.Attribute):
        return sp.Symbol(ast.unparse(node).replace(".", "_"), integer=True)
    if isinstance(node, ast.BinOp):
        a, b = _host(node.left), _host(node.right)
        if a is None or b is None:
            return None
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: sp.floor(a / b), ast.Mod: lambda: sp.Mod(a, b)}
        make = ops.get(type(node.op))
        return make() if make else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name) and len(node.args) == 2:
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        a, b = _host(node.args[0]), _host(node.args[1])
        if a is None or b is None:
            return None
        if name == "cdiv":
            return sp.ceiling(a / b)
        if name in ("min", "max"):
            return (sp.Min if name == "min" else sp.Max)(a, b)
    if isinstance(node, ast.Call):
        return sp.Symbol(ast.unparse(node), integer=True)  # ``x.numel()``, ``len(x)``: one opaque host value
    return None


def _grid(source: str, scope: ast.AST | None = None) -> tuple[sp.Expr | None, ...] | None:
    """The grid's axes; a name is followed to its one assignment or ``def`` in ``scope`` (``grid = lambda META: ...``)."""
    try:
        node = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, ast.Name) and scope is not None:
        node = _named_grid(scope, node.id)
    if isinstance(node, ast.Lambda):
        node = node.body
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_host(e) for e in node.elts)
    return None


def _named_grid(scope: ast.AST, name: str) -> ast.expr | None:
    """What ``name`` is bound to in ``scope``, when bound once: an expression, or a ``def``'s one returned value."""
    found = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            found.append(node.value)
        elif isinstance(node, ast.FunctionDef) and node.name == name:
            returns = [r.value for r in ast.walk(node) if isinstance(r, ast.Return) and r.value is not None]
            found.append(returns[0] if len(returns) == 1 else None)
    return found[0] if len(found) == 1 else None


def _scopes(analysis: FileAnalysis) -> dict[str | None, ast.AST]:
    """Host function name -> its ``def`` (None -> the module), from one parse of the file."""
    try:
        tree = ast.parse(analysis.text)
    except SyntaxError:
        return {}
    scopes: dict[str | None, ast.AST] = {None: tree}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            scopes.setdefault(node.name, node)
    return scopes


def host_expression(source: str) -> sp.Expr | None:
    """A host expression as sympy, host names as symbols (``triton.cdiv(n, B)`` -> ``ceiling(n/B)``); None if unread."""
    return _host_expr(source) if source else None


def host_grid(source: str) -> tuple[sp.Expr | None, ...] | None:
    """A launch grid's axes (a tuple or a ``lambda META:`` tuple, ``META["B"]`` as ``B``); None when not one."""
    return _grid(source)


def _launch_models(analysis: FileAnalysis, kernel: Kernel) -> list[LaunchModel]:
    launches = analysis.launches_of(kernel.name)
    scopes = _scopes(analysis) if launches else {}
    configs = [dict(cfg.kwargs) for cfg in kernel.autotune.configs] if kernel.autotune and kernel.autotune.configs_known else [{}]
    out = []
    for launch in launches:
        base = launch.constexpr_values(kernel)
        out.append(LaunchModel(_grid(launch.grid_source, scopes.get(launch.host_function, scopes.get(None))),
                               {a.param: a.source for a in launch.args if a.param}, launch.host_function,
                               launch.span.start.line, [{**base, **config} for config in configs]))
    return out


_models: dict[tuple[str, str], KernelModel] = {}


def kernel_model(analysis: FileAnalysis, kernel: Kernel) -> KernelModel:
    """The model of ``kernel`` (cached by the file's text and the kernel's name)."""
    key = (analysis.text, kernel.name)
    found = _models.get(key)
    if found is not None:
        return found
    builder = _Builder(analysis, kernel)
    if kernel.node is not None:
        builder.block(kernel.node.body)
    model = KernelModel(kernel.name, builder.program_ids, builder.parts, builder.aranges, builder.loops,
                        builder.accesses, builder.reductions, builder.bindings, builder.params, builder.pointers,
                        _launch_models(analysis, kernel), opaque=kernel.node is None,
                        defaults={p.name: sp.Integer(p.default_value) for p in kernel.params
                                  if isinstance(p.default_value, int) and not isinstance(p.default_value, bool)})
    if len(_models) >= _CACHE_SIZE:
        _models.pop(next(iter(_models)))
    _models[key] = model
    return model


def file_links(analysis: FileAnalysis) -> list[Link]:
    """Producer -> consumer pairs: a launch stores through a host tensor that a later launch in the same host
    function loads (the buffer passed to both by the same name)."""
    launches = sorted(analysis.launches, key=lambda launch: launch.span.start_offset)
    links = []
    for i, first in enumerate(launches):
        producer = analysis.kernel(first.kernel)
        if producer is None:
            continue
        stored = {a.source: a.param for a in first.args if a.param in {s.tensor for s in kernel_model(analysis, producer).stores()}}
        for later in launches[i + 1:]:
            if later.host_function != first.host_function:
                continue
            consumer = analysis.kernel(later.kernel)
            if consumer is None:
                continue
            cmodel = kernel_model(analysis, consumer)
            for arg in later.args:
                if arg.source in stored:
                    store = next(s for s in kernel_model(analysis, producer).stores() if s.tensor == stored[arg.source])
                    for load in cmodel.loads():
                        if load.tensor == arg.param:
                            links.append(Link(arg.source, producer.name, store, consumer.name, load, first.host_function))
    return links
