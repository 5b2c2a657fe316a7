"""Per-kernel facts from a kernel's syntax tree: memory ops, dots, aranges, shapes, program-id names.

The tree is the analysis' own (``Kernel.node``, no second parse); a kernel without one is parsed
from its source. A kernel's facts depend only on its source text, so they are cached by that text:
while a user types in one kernel, the other kernels of the file cost nothing, wherever they move.
"""

from __future__ import annotations

import ast
import functools
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..analysis import TritonNames
from ..triton_rules import DTYPE_BYTES

MASKED_POINTER_OPS = frozenset({"load", "store"})
CLAMPING_OPS = frozenset({"minimum", "maximum", "where", "clamp"})
BLOCK_POINTER_OPS = frozenset({"make_block_ptr", "advance", "make_tensor_descriptor"})
SHAPE_PRESERVING_METHODS = frozenset({"to", "cast", "multiple_of", "max_contiguous", "abs", "exp", "exp2", "log"})
TL_ELEMENTWISE_KEEP_FIRST = frozenset(
    {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "abs", "cast", "multiple_of", "max_contiguous", "fma",
     "erf", "sin", "cos", "maximum", "minimum", "where"}
)
# Host helpers of the ``triton`` package that fold to a scalar inside a kernel (``triton.cdiv(K, BLOCK_K)``).
TRITON_SCALAR_HELPERS = frozenset({"triton.cdiv", "triton.next_power_of_2"})


@dataclass
class MemoryOp:
    """A ``tl.load``/``tl.store`` (or atomic) with what the mask check needs to know."""

    op: str
    node: ast.Call
    pointer: ast.AST | None
    has_mask: bool
    block_pointer: bool  # a block pointer or descriptor: bounds come from boundary_check, not a mask
    guarded_by_constexpr: bool  # inside ``if EVEN_K:``-style branches: the author proved it in-bounds
    loop: ast.For | ast.While | None = None  # the innermost loop around it (whole_tiles reads its range)


@dataclass
class DotOp:
    node: ast.Call
    a: ast.AST
    b: ast.AST
    loop_depth: int
    loop_num_stages: ast.AST | None  # ``tl.range(..., num_stages=N)`` around it


@dataclass
class KernelFacts:
    """Facts from one kernel's source, independent of where the kernel sits in the file."""

    fn: ast.FunctionDef
    # Added to ``def line (0-based) + node.lineno`` to get a node's 1-based file line: 0 for a parse
    # of the kernel's source, -1 inside the ``if 1:`` wrapper (indented kernels), -def line for
    # the file's own nodes.
    line_shift: int
    assignments: dict[str, list[ast.AST]]
    memory_ops: list[MemoryOp]
    aranges: list[ast.Call]
    shape_tuples: list[tuple[ast.Call, ast.AST]]  # tl.zeros/tl.full/block_shape=... with the shape node
    dots: list[DotOp]
    compared_names: set[str]  # names used in a comparison (``offs < n``): bounds the author checks
    names: TritonNames  # how the file spells triton.language (the analysis' resolution of its imports)
    _shapes: dict[str, tuple | None] = field(default_factory=dict)

    def clamped(self, name: str) -> bool:
        """``name``'s last value is a clamp of itself (``tl.where(x < M, x, 0)``, ``x % M``), hints aside."""
        return _clamped_last(name, self.assignments.get(name, []), self.tl_op)

    @functools.cached_property
    def program_id_names(self) -> set[str]:
        """Names whose value derives from tl.program_id, not wrapped by % or a clamp (computed on demand)."""
        return _program_id_names(self.assignments, self.tl_op)

    # ---- shapes ------------------------------------------------------------------------------
    def dot_tiles(self) -> Iterator[tuple[DotOp, tuple, tuple]]:
        """``(dot, a_shape, b_shape)`` for each 2-D ``tl.dot`` whose operand shapes are inferable."""
        for dot in self.dots:
            a_shape, b_shape = self.shape_of(dot.a), self.shape_of(dot.b)
            if a_shape and b_shape and len(a_shape) == 2 and len(b_shape) == 2:
                yield dot, a_shape, b_shape

    def shape_of(self, node: ast.AST, depth: int = 0) -> tuple | None:
        """The block shape of an expression as a tuple of AST nodes (dims), () for scalars, None unknown."""
        if depth > 40:
            return None
        if isinstance(node, ast.Constant):
            return ()
        if isinstance(node, ast.Name):
            if node.id in self._shapes:
                return self._shapes[node.id]
            values = self.assignments.get(node.id)
            # cycle guard: in ``acc += x`` / ``X += row * stride`` the name's own earlier value is taken
            # as scalar, so the other operand decides (and a pointer parameter stays a scalar base)
            self._shapes[node.id] = ()
            shape = None
            if values:
                shapes = [self.shape_of(v, depth + 1) for v in values]
                known = [s for s in shapes if s is not None]
                shape = known[0] if known else None
            elif node.id not in self.assignments:
                shape = ()  # a parameter or a global: a scalar
            self._shapes[node.id] = shape
            return shape
        if isinstance(node, ast.Subscript):
            base = self.shape_of(node.value, depth + 1)
            if base is None:
                return None
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            dims, rest = [], list(base)
            for item in items:
                if isinstance(item, ast.Constant) and item.value is None:
                    dims.append(ast.Constant(1))
                elif isinstance(item, ast.Slice):
                    if not rest:
                        return None
                    dims.append(rest.pop(0))
                else:
                    return None
            return tuple(dims + rest)
        if isinstance(node, ast.BinOp):
            return _broadcast(self.shape_of(node.left, depth + 1), self.shape_of(node.right, depth + 1))
        if isinstance(node, ast.UnaryOp):
            return self.shape_of(node.operand, depth + 1)
        if isinstance(node, ast.Compare):
            shape = self.shape_of(node.left, depth + 1)
            for comparator in node.comparators:
                shape = _broadcast(shape, self.shape_of(comparator, depth + 1))
            return shape
        if isinstance(node, ast.Attribute) and node.attr == "T":
            inner = self.shape_of(node.value, depth + 1)
            return tuple(reversed(inner)) if inner else inner
        if isinstance(node, ast.Call):
            return self._call_shape(node, depth)
        return None

    def _call_shape(self, node: ast.Call, depth: int) -> tuple | None:
        op = self.tl_op(node.func)
        args = node.args
        if op in ("range", "static_range", "program_id", "num_programs", "cdiv") or (
            isinstance(node.func, ast.Name) and node.func.id in ("range", "min", "max", "int", "float", "len")
        ) or (op is None and self.names.canonical(node.func) in TRITON_SCALAR_HELPERS):
            return ()  # loop counters and scalar helpers
        if op == "arange" and len(args) == 2:
            return (ast.BinOp(args[1], ast.Sub(), args[0]),)
        if op in ("zeros", "full") and args:
            return _tuple_dims(args[0])
        if op == "load":
            pointer = args[0] if args else _kwarg(node, "pointer")
            return self.shape_of(pointer, depth + 1) if pointer is not None else None
        if op == "make_block_ptr":
            return _tuple_dims(_kwarg(node, "block_shape"))
        if op == "advance" and args:
            return self.shape_of(args[0], depth + 1)
        if op == "dot" and len(args) >= 2:
            a, b = self.shape_of(args[0], depth + 1), self.shape_of(args[1], depth + 1)
            if a and b and len(a) == 2 and len(b) == 2:
                return (a[0], b[1])
            return None
        if op == "trans" and args:
            inner = self.shape_of(args[0], depth + 1)
            return tuple(reversed(inner)) if inner else inner
        if op in TL_ELEMENTWISE_KEEP_FIRST and args:
            shape = self.shape_of(args[0], depth + 1)
            for extra in args[1:]:
                shape = _broadcast(shape, self.shape_of(extra, depth + 1))
            return shape
        if op is None and isinstance(node.func, ast.Attribute):
            method = node.func.attr
            if method in SHAPE_PRESERVING_METHODS:
                return self.shape_of(node.func.value, depth + 1)
            if method == "load":  # tensor descriptor: desc.load([x, y]) -> the descriptor's block shape
                return self.shape_of(node.func.value, depth + 1)
        if op == "make_tensor_descriptor":
            return _tuple_dims(_kwarg(node, "block_shape"))
        return None

    def dtype_bytes(self, node: ast.AST, depth: int = 0) -> tuple[int, bool]:
        """Element size of a dot operand and whether it is known (False: the fp16 assumption)."""
        if depth > 20:
            return 2, False
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to" and node.args:
            name = _dtype_name(node.args[0], self.names)
            if name in DTYPE_BYTES:
                return DTYPE_BYTES[name], True
        if isinstance(node, ast.Name):
            for value in self.assignments.get(node.id, [])[:1]:
                return self.dtype_bytes(value, depth + 1)
        return 2, False

    def tl_op(self, func: ast.AST) -> str | None:
        """``tl.load`` -> "load" for however the file spells triton.language."""
        return self.names.tl_op(func)


def _kwarg(node: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in node.keywords if k.arg == name), None)


def _tuple_dims(node: ast.AST | None) -> tuple | None:
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(node.elts)
    if node is not None:
        return (node,)
    return None


def _dtype_name(node: ast.AST, names: TritonNames) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):  # ``from triton.language import float32``
        return names.tl_op(node)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _broadcast(left: tuple | None, right: tuple | None) -> tuple | None:
    if left is None or right is None:
        return None
    if not left:
        return right
    if not right:
        return left
    if len(left) != len(right):
        return None
    return tuple(r if _is_one(l) else l for l, r in zip(left, right))


def _is_one(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == 1


_AST = ast.AST
_SKIP_FIELDS = frozenset({"ctx", "type_comment"})


def fast_walk(root: ast.AST) -> list[ast.AST]:
    """All nodes under ``root`` (no order promised); ~3x faster than ``ast.walk`` (no ctx nodes, no generators)."""
    out = [root]
    stack = [root]
    while stack:
        node = stack.pop()
        for name in node._fields:
            if name in _SKIP_FIELDS:
                continue
            value = getattr(node, name, None)
            if value.__class__ is list:
                for item in value:
                    if isinstance(item, _AST):
                        out.append(item)
                        stack.append(item)
            elif isinstance(value, _AST):
                out.append(value)
                stack.append(value)
    return out


def children(node: ast.AST) -> list[ast.AST]:
    """Direct child nodes, without expression contexts."""
    out = []
    for name in node._fields:
        if name in _SKIP_FIELDS:
            continue
        value = getattr(node, name, None)
        if value.__class__ is list:
            out.extend(item for item in value if isinstance(item, _AST))
        elif isinstance(value, _AST):
            out.append(value)
    return out


class _FactsWalker:
    """One pass over a kernel body: statements recursively, expressions with one ``fast_walk`` each.

    (Cheaper than ``ast.NodeVisitor``'s per-node dispatch; this runs on every keystroke.)
    """

    def __init__(self, names: TritonNames, constexpr_names: set[str]):
        self.tl_op = names.tl_op
        self.constexpr_names = constexpr_names
        self.assignments: dict[str, list[ast.AST]] = {}
        self.memory_ops: list[MemoryOp] = []
        self.aranges: list[ast.Call] = []
        self.shape_tuples: list[tuple[ast.Call, ast.AST]] = []
        self.dots: list[DotOp] = []
        self.compared: set[str] = set()
        self.loop_depth = 0
        self.loop_stages: list[ast.AST | None] = []
        self.loops: list[ast.For | ast.While] = []
        self.guard = 0

    def _assign(self, target: ast.AST, value: ast.AST | None) -> None:
        if isinstance(target, ast.Name) and value is not None:
            self.assignments.setdefault(target.id, []).append(value)
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:  # a, b = f(): unknown per-element values
                if isinstance(element, ast.Name):
                    self.assignments.setdefault(element.id, []).append(ast.Constant(None))

    def body(self, statements: list[ast.stmt]) -> None:
        for stmt in statements:
            self.statement(stmt)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return  # nested definitions are not this kernel's body
        if isinstance(node, ast.For):
            if isinstance(node.target, ast.Name):
                self.assignments.setdefault(node.target.id, []).append(node.iter)
            self.expression(node.iter)
            self.loop(node, _kwarg(node.iter, "num_stages") if isinstance(node.iter, ast.Call) else None)
        elif isinstance(node, ast.While):
            self.expression(node.test)
            self.loop(node, None)
        elif isinstance(node, ast.If):
            self.expression(node.test)
            # ``if EVEN_K:`` or ``if pid < n:``: the author handles the bounds in this branch
            guarded = any(
                (n.__class__ is ast.Name and n.id in self.constexpr_names) or n.__class__ is ast.Compare
                for n in fast_walk(node.test)
            )
            self.guard += guarded
            self.body(node.body)
            self.body(node.orelse)
            self.guard -= guarded
        elif isinstance(node, ast.With):
            for item in node.items:
                self.expression(item.context_expr)
            self.body(node.body)
        elif isinstance(node, ast.Try):
            self.body(node.body)
            for handler in node.handlers:
                self.body(handler.body)
            self.body(node.orelse)
            self.body(node.finalbody)
        else:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self._assign(target, node.value)
            elif isinstance(node, ast.AnnAssign):
                self._assign(node.target, node.value)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                self.assignments.setdefault(node.target.id, []).append(
                    ast.BinOp(ast.Name(node.target.id, ast.Load()), node.op, node.value)
                )
            self.expression(node)

    def loop(self, node: ast.For | ast.While, num_stages: ast.AST | None) -> None:
        """A loop's body and ``else``, one level deeper, with the loop's ``num_stages`` (None: not given)."""
        self.loop_depth += 1
        self.loop_stages.append(num_stages)
        self.loops.append(node)
        self.body(node.body)
        self.loops.pop()
        self.body(node.orelse)
        self.loop_stages.pop()
        self.loop_depth -= 1

    def expression(self, root: ast.AST) -> None:
        for node in fast_walk(root):
            kind = node.__class__
            if kind is ast.Call:
                self.call(node)
            elif kind is ast.Compare:
                for part in [node.left, *node.comparators]:
                    if part.__class__ is ast.Name:
                        self.compared.add(part.id)
                    else:
                        self.compared.update(n.id for n in fast_walk(part) if n.__class__ is ast.Name)

    def call(self, node: ast.Call) -> None:
        op = self.tl_op(node.func)
        if op is None:
            return
        if op in MASKED_POINTER_OPS or op.startswith("atomic_"):
            pointer = node.args[0] if node.args else _kwarg(node, "pointer")
            mask = _kwarg(node, "mask")
            positional_mask = 2 if op == "load" else 3
            has_mask = len(node.args) >= positional_mask or mask is not None
            if isinstance(mask, ast.Constant) and mask.value is None:
                has_mask = False
            block = _kwarg(node, "boundary_check") is not None
            loop = self.loops[-1] if self.loops else None
            self.memory_ops.append(MemoryOp(op, node, pointer, has_mask, block, self.guard > 0, loop))
        elif op == "arange":
            self.aranges.append(node)
        elif op in ("zeros", "full") and node.args:
            self.shape_tuples.append((node, node.args[0]))
        elif op in ("make_block_ptr", "make_tensor_descriptor"):
            shape = _kwarg(node, "block_shape")
            if shape is not None:
                self.shape_tuples.append((node, shape))
        elif op == "dot" and len(node.args) >= 2:
            stages = next((s for s in reversed(self.loop_stages) if s is not None), None)
            self.dots.append(DotOp(node, node.args[0], node.args[1], self.loop_depth, stages))


def _program_id_names(assignments: dict[str, list[ast.AST]], tl_op) -> set[str]:
    """Names whose value comes from ``tl.program_id`` (directly or through other such names).

    A value wrapped by ``% size`` or a clamp (tl.minimum/tl.where) is in range, so it stops the chain.
    """
    direct: set[str] = set()
    depends: dict[str, set[str]] = {}
    for name, values in assignments.items():
        if _clamped_last(name, values, tl_op):
            continue  # offs = start + tl.arange(...); offs = tl.where(offs < M, offs, 0): in range from then on
        refs: set[str] = set()
        for value in values:
            stack = [value]
            while stack:
                node = stack.pop()
                kind = node.__class__
                if kind is ast.Name:
                    refs.add(node.id)
                    continue
                if kind is ast.Constant:
                    continue
                if kind is ast.BinOp:
                    if node.op.__class__ is not ast.Mod:  # offs % M wraps into range
                        stack.append(node.left)
                        stack.append(node.right)
                    continue
                if kind is ast.Call:
                    op = tl_op(node.func)
                    if op == "program_id":
                        direct.add(name)
                        continue
                    if op in CLAMPING_OPS:
                        continue
                stack.extend(children(node))
        depends[name] = refs
    names = set(direct)
    changed = True
    while changed:
        changed = False
        for name, refs in depends.items():
            if name not in names and refs & names:
                names.add(name)
                changed = True
    return names


HINT_OPS = frozenset({"multiple_of", "max_contiguous", "max_constancy"})  # value-preserving compiler hints


def _clamped_last(name: str, values: list[ast.AST], tl_op) -> bool:
    """Whether ``name``'s assignments end with a clamp of itself (``tl.where(x < M, x, 0)``, ``tl.minimum``,
    ``x % M``) followed by nothing but hints on itself (``tl.multiple_of(x, B)``): lightllm's wrapped offsets."""
    def of_itself(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))

    def hint(node: ast.AST) -> bool:
        while isinstance(node, ast.Call) and tl_op(node.func) in HINT_OPS and node.args:
            node = node.args[0]
        return isinstance(node, ast.Name) and node.id == name

    for value in reversed(values):
        if hint(value):
            continue
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mod):
            return of_itself(value.left)
        return isinstance(value, ast.Call) and tl_op(value.func) in CLAMPING_OPS and of_itself(value)
    return False


# Facts per (kernel source, indented, the file's import spellings): while a user types in one kernel,
# the other kernels of the file are not walked again. Hover reads facts on the event loop while the
# analysis thread runs the checks, hence the lock. Bounded by entries and by the kernel source they
# hold: an entry keeps its kernel's syntax tree, roughly proportional to the source, so a few big
# kernels cannot hold as much as 512 small ones; the server drops a closed document's entries.
FACTS_CACHE_SIZE = 512
FACTS_CACHE_CHARS = 256 * 1024
_facts_cache: OrderedDict[tuple[str, bool, TritonNames], KernelFacts | None] = OrderedDict()
_facts_chars = 0
_facts_lock = threading.Lock()


def cached_source(text: str, kernel) -> str:
    """The text a kernel's facts are cached under: from the start of its ``def`` line through its body."""
    span = kernel.def_span
    return text[text.rfind("\n", 0, span.start_offset) + 1:span.end_offset]


def kernel_facts(source: str, indented: bool, names: TritonNames, fn: ast.FunctionDef | None = None,
                 def_line: int = 0) -> KernelFacts | None:
    """Facts of one kernel whose source (``def`` through the body, indentation kept) is ``source``.

    ``fn`` is that kernel's node from the file's parse, with ``def`` on 0-based line ``def_line``
    (``Kernel.node``): walked as is. Without it the source is parsed on its own.
    """
    key = (source, indented, names)
    with _facts_lock:
        if key in _facts_cache:
            _facts_cache.move_to_end(key)
            return _facts_cache[key]
    if fn is not None:
        # File line numbers: node_span's ``def line + lineno + shift`` must give ``lineno`` back.
        facts = _facts(fn, -def_line, names)
    else:
        facts = _parsed_facts(source, indented, names)
    global _facts_chars
    with _facts_lock:
        if key not in _facts_cache:
            _facts_chars += len(source)
        _facts_cache[key] = facts
        while len(_facts_cache) > 1 and (len(_facts_cache) > FACTS_CACHE_SIZE or _facts_chars > FACTS_CACHE_CHARS):
            dropped, _ = _facts_cache.popitem(last=False)
            _facts_chars -= len(dropped[0])
    return facts


def forget_facts(source_hashes: set[int]) -> int:
    """Drop the entries whose kernel source has one of these ``hash()`` values (a closed document's); how many."""
    global _facts_chars
    with _facts_lock:
        keys = [key for key in _facts_cache if hash(key[0]) in source_hashes]
        for key in keys:
            del _facts_cache[key]
            _facts_chars -= len(key[0])
    return len(keys)


def facts_cache_usage() -> tuple[int, int]:
    """(entries, characters of kernel source) held by the facts cache."""
    with _facts_lock:
        return len(_facts_cache), _facts_chars


def clear_facts_cache() -> None:
    global _facts_chars
    with _facts_lock:
        _facts_cache.clear()
        _facts_chars = 0


def _parsed_facts(source: str, indented: bool, names: TritonNames) -> KernelFacts | None:
    text = f"if 1:\n{source}" if indented else source
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    fn = module.body[0].body[0] if indented else module.body[0]
    if not isinstance(fn, ast.FunctionDef):
        return None
    # Snippet line numbers: line 1 is the ``def`` (line 2 inside the ``if 1:`` wrapper).
    return _facts(fn, -1 if indented else 0, names)


def _facts(fn: ast.FunctionDef, line_shift: int, names: TritonNames) -> KernelFacts:
    constexprs = {
        a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        if isinstance(a.annotation, ast.Attribute | ast.Name | ast.Constant)
        and "constexpr" in (getattr(a.annotation, "attr", "") or getattr(a.annotation, "id", "") or str(a.annotation.value if isinstance(a.annotation, ast.Constant) else ""))
    }
    walker = _FactsWalker(names, constexprs)
    walker.body(fn.body)
    return KernelFacts(
        fn=fn,
        line_shift=line_shift,
        assignments=walker.assignments,
        memory_ops=walker.memory_ops,
        aranges=walker.aranges,
        shape_tuples=walker.shape_tuples,
        dots=walker.dots,
        compared_names=walker.compared,
        names=names,
    )
