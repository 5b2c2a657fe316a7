"""Shared libcst plumbing for the actions: find kernels and launches, read and rewrite their arguments."""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field

import libcst as cst
import sympy as sp

from ..analysis import FileAnalysis, Kernel, LaunchSite
from ..analysis.kernel_model import KernelModel, host_expression, host_grid, kernel_model
from ..analysis.parse import DICT_MUTATORS, WRAPPERS
from ..edits import changed_line_count
from ..triton_rules import DEFAULT_NUM_STAGES, DEFAULT_NUM_WARPS, TORCH_DTYPE_BYTES  # noqa: F401 - re-exported
from ..triton_rules import dot_shared_bytes as rules_dot_shared_bytes
from .base import ActionError, Edit

# fp32 accumulator elements one thread may hold before the tile spills (of 255 registers).
MAX_ACC_REGS_PER_THREAD = 128
# Registers a thread may use before ptxas spills to local memory.
MAX_REGS_PER_THREAD = 255
# Registers a tl.dot loop needs besides its tiles (loop counters, strides, masks, bases, epilogue);
# Ampere's mma.sync layouts cost more than Hopper's wgmma.
DOT_BASE_REGS = {90: 55, 80: 80}


def dot_regs_per_thread(bm: int, bn: int, bk: int, num_warps: int, elem: int, arch: int = 90) -> int:
    """Estimated registers per thread of a ``tl.dot`` K loop: accumulator + staged operands + their pointers.

    Each thread holds BM*BN/threads fp32 accumulator values, its share of the A and B tiles on the
    way to shared memory (elem-byte values packed in 32-bit registers), and a 64-bit pointer per
    16-byte vector of those loads. The base is calibrated against ptxas through ``compile_kernel``
    (fp16 matmul, triton 3.9, 12 tiles x warps per arch, all predicted right): on sm_90 128x128x64
    over 4 warps (estimate 279) spills 344 bytes, 128x256x64 over 8 warps (255) uses 255 registers
    and does not spill, 128x128x64 over 8 (167) neither; on sm_80 128x128x32 over 4 warps (256)
    spills 40 bytes and 128x256x64 over 8 warps (280) 120, while 64x128x64 over 4 warps (216) and
    128x256x32 over 8 (244) do not.
    """
    threads = 32 * max(num_warps, 1)
    acc = bm * bn // threads
    operand_elems = (bm * bk + bk * bn) // threads
    operand_regs = operand_elems * elem // 4
    pointer_regs = 2 * max(1, operand_elems * elem // 16)
    return acc + operand_regs + pointer_regs + DOT_BASE_REGS[90 if arch >= 90 else 80]


@functools.lru_cache(maxsize=16)
def parse(text: str) -> cst.Module:
    """The libcst tree of ``text`` (cached: trees are immutable, and every action of a request reads one)."""
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise ActionError(f"the file does not parse: {exc.message} (line {exc.raw_line})") from exc
    if len(_SOURCES) >= 16:  # as many as the cache above keeps; the tree is kept so its id stays unique
        _SOURCES.pop(next(iter(_SOURCES)))
    _SOURCES[id(module)] = (module, text)
    return module


# id(module) -> (module, its text) for the trees ``parse`` made: ``locate`` reads spellings from the text.
_SOURCES: dict[int, tuple[cst.Module, str]] = {}


def expr(source: str) -> cst.BaseExpression:
    return cst.parse_expression(source)


def stmt(source: str) -> cst.BaseStatement:
    return cst.parse_statement(source)


def code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


class _Replacer(cst.CSTTransformer):
    def __init__(self, mapping: dict[int, tuple[cst.CSTNode, cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel]]):
        self.mapping = mapping

    def on_leave(self, original_node, updated_node):
        hit = self.mapping.get(id(original_node))
        if hit is not None and hit[0] is original_node:
            return hit[1]
        return updated_node


def replace_all(module: cst.CSTNode, pairs: list[tuple[cst.CSTNode, object]]):
    """Replace several original nodes of ``module`` (or of any subtree) in one pass (node identity does not
    survive a pass)."""
    return module.visit(_Replacer({id(old): (old, new) for old, new in pairs}))


class _NameSubstitution(cst.CSTTransformer):
    def __init__(self, mapping: dict[str, str | cst.BaseExpression]):
        self.mapping = mapping

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        new = self.mapping.get(updated_node.value)
        if new is None:
            return updated_node
        return updated_node.with_changes(value=new) if isinstance(new, str) else new

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        return updated_node.with_changes(keyword=original_node.keyword)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        return updated_node.with_changes(attr=original_node.attr)


def substitute_names(node, mapping: dict[str, str | cst.BaseExpression]):
    """``node`` with each ``Name`` in ``mapping`` replaced: a string renames it (keeping its parentheses), an
    expression takes its place; keyword names of calls and attribute names stay (``tl.load(x, mask=m)``)."""
    return node.visit(_NameSubstitution(mapping)) if mapping else node


def contains(node: cst.CSTNode, kind: type[cst.CSTNode], test=lambda found: True) -> bool:
    """Whether ``node`` or a node inside it is a ``kind`` that passes ``test``."""
    found = False

    class V(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            nonlocal found
            found = found or (isinstance(n, kind) and test(n))
            return not found  # nothing below needs a look once one is found

    node.visit(V())
    return found


def finish(old_text: str, module: cst.Module, summary: str, notes: list[str] | None = None) -> Edit:
    new_text = module.code
    if new_text == old_text:
        raise ActionError("the action would not change anything here")
    compile(new_text, "<edit>", "exec")  # never hand back text that does not parse
    return Edit(new_text=new_text, changed_lines=changed_line_count(old_text, new_text), summary=summary, notes=notes or [])


# ---- locating kernels, host functions and launches ------------------------------------------------
@dataclass
class LaunchNode:
    call: cst.Call
    host: cst.FunctionDef | None  # None for a launch at module level
    module: cst.Module | None = None  # the module holding both (module-level constants live there)


class _Finder(cst.CSTVisitor):
    def __init__(self, kernel: str, names: frozenset[str] = frozenset(), factories: frozenset[str] = frozenset()):
        self.kernel = kernel
        self.names = {kernel, *names}  # the def's name and the analysis' launch names
        self.factories = factories  # functions that return the kernel
        self.defs: list[cst.FunctionDef] = []
        self.launches: list[LaunchNode] = []
        self._stack: list[cst.FunctionDef] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node.name.value == self.kernel:
            self.defs.append(node)
        self._stack.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._stack.pop()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Subscript):
            callee = func.value
            if isinstance(callee, cst.Call) and _plain_name(callee.func) in WRAPPERS and len(callee.args) == 1:
                hit = _plain_name(callee.args[0].value) in self.names  # ``wrap_triton(kernel)[grid](...)``
            elif isinstance(callee, cst.Call):  # ``make_kernel(...)[grid](...)``
                hit = _plain_name(callee.func) in self.factories
            else:
                name = _plain_name(callee)
                hit = name in self.names or (isinstance(callee, cst.Name) and self._made_here(name))
            if hit:
                self.launches.append(LaunchNode(node, self._stack[-1] if self._stack else None))

    def _made_here(self, name: str) -> bool:
        """``name`` is bound once in the enclosing function, to a factory's result (as the analysis reads it)."""
        if not self.factories or not self._stack:
            return False
        host = self._stack[-1]
        assign = any_assignment(host, name)
        return (assign is not None and isinstance(assign.value, cst.Call)
                and _plain_name(assign.value.func) in self.factories and name not in _param_names(host))


def _plain_name(node: cst.CSTNode) -> str | None:
    """``k`` for ``k`` and ``mod.k``; None for anything else."""
    return node.attr.value if isinstance(node, cst.Attribute) else node.value if isinstance(node, cst.Name) else None


# Files that may hold a kernel spelled another way: an indented ``@jit`` (a factory's kernel) or ``jit(f)``.
_OTHER_SPELLINGS = re.compile(r"^[ \t]+@[\w.]*jit\b|\bjit\(\s*[A-Za-z_]\w*\s*[,)]|\bjit\([^()]*\)\s*\(", re.M)


@functools.lru_cache(maxsize=16)
def _spellings_of(text: str) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Kernel name -> (its launch names, its factories), from the analysis of ``text``."""
    if not _OTHER_SPELLINGS.search(text):
        return {}
    from ..analysis import analyze

    analysis = analyze(text)
    return {k.name: (frozenset(k.launch_names), frozenset(k.factories)) for k in analysis.kernels
            if k.launch_names or k.factories}


def _spellings(module: cst.Module, kernel: str) -> tuple[frozenset[str], frozenset[str]]:
    hit = _SOURCES.get(id(module))
    text = hit[1] if hit is not None and hit[0] is module else module.code
    return _spellings_of(text).get(kernel, (frozenset(), frozenset()))


# (id(module), kernel) -> (module, kernel def, launches); the module is kept so its id stays unique.
_LOCATED: dict[tuple[int, str], tuple[cst.Module, cst.FunctionDef, list[LaunchNode]]] = {}
_LOCATED_MAX = 64


def locate(module: cst.Module, kernel: str) -> tuple[cst.FunctionDef, list[LaunchNode]]:
    """The kernel's definition and its launches (with their host functions) in ``module``."""
    hit = _LOCATED.get((id(module), kernel))
    if hit is not None and hit[0] is module:
        return hit[1], list(hit[2])
    finder = _Finder(kernel, *_spellings(module, kernel))
    module.visit(finder)
    if len(finder.defs) != 1:
        raise ActionError(f"kernel {kernel!r} is defined {len(finder.defs)} times in this file")
    if len(_LOCATED) >= _LOCATED_MAX:
        _LOCATED.pop(next(iter(_LOCATED)))
    for launch in finder.launches:
        launch.module = module
    _LOCATED[(id(module), kernel)] = (module, finder.defs[0], finder.launches)
    return finder.defs[0], list(finder.launches)


def host_assignment(host: cst.FunctionDef | cst.Module | None, name: str) -> cst.Assign | None:
    """The single top-level ``name = value`` of a host function (or module); None when not exactly one."""
    if host is None:
        return None
    body = host.body.body if isinstance(host, cst.FunctionDef) else host.body
    found: list[cst.Assign] = []
    for statement in body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign) and any(
                    isinstance(t.target, cst.Name) and t.target.value == name for t in small.targets
                ):
                    found.append(small)
                elif isinstance(small, cst.AugAssign | cst.AnnAssign) and isinstance(small.target, cst.Name) and small.target.value == name:
                    return None
    return found[0] if len(found) == 1 and len(found[0].targets) == 1 else None


class _Assignments(cst.CSTVisitor):
    """Every ``name = ...`` (and augmented/annotated rebinding) of a function body or module, nested blocks included."""

    def __init__(self, name: str, root: cst.CSTNode):
        self.name = name
        self.root = root
        self.found: list[cst.Assign] = []
        self.rebound = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.root  # a nested def has its own scope

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        for t in node.targets:
            if isinstance(t.target, cst.Name) and t.target.value == self.name:
                self.found.append(node)
            elif self.name in names_in(t.target):
                self.rebound = True

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.rebound = self.rebound or self.name in names_in(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.rebound = self.rebound or self.name in names_in(node.target)

    def visit_For(self, node: cst.For) -> None:
        self.rebound = self.rebound or self.name in names_in(node.target)


# (id(root), name) -> (root, answer): trees are immutable, and every action of a request asks again.
_ASSIGNMENTS: dict[tuple[int, str], tuple[cst.CSTNode, cst.Assign | None]] = {}


def any_assignment(root: cst.FunctionDef | cst.Module, name: str) -> cst.Assign | None:
    """The single ``name = value`` anywhere in a function body (loops, ifs, with) or module; None otherwise."""
    hit = _ASSIGNMENTS.get((id(root), name))
    if hit is not None and hit[0] is root:
        return hit[1]
    finder = _Assignments(name, root)
    root.visit(finder)
    found = None if finder.rebound or len(finder.found) != 1 or len(finder.found[0].targets) != 1 else finder.found[0]
    if len(_ASSIGNMENTS) >= 64:  # bounded: entries keep their trees alive
        _ASSIGNMENTS.clear()
    _ASSIGNMENTS[(id(root), name)] = (root, found)
    return found


def _param_names(fn: cst.FunctionDef) -> set[str]:
    """Every parameter name of ``fn``, ``*args`` and ``**kwargs`` included."""
    params = fn.params
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    every += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    return {p.name.value for p in every}


def _binds(host: cst.FunctionDef, name: str) -> bool:
    """True when the function binds ``name`` itself (a parameter or any assignment)."""
    if name in _param_names(host):
        return True
    finder = _Assignments(name, host)
    host.visit(finder)
    return bool(finder.found) or finder.rebound


def launch_assignment(launch: "LaunchNode", name: str) -> tuple[cst.Assign | None, bool]:
    """Where the name a launch reads is set: (assignment, True when it is a module-level constant)."""
    if launch.host is not None:
        assign = any_assignment(launch.host, name)
        if assign is not None or _binds(launch.host, name):
            return assign, False
    if launch.module is None:
        return None, False
    return any_assignment(launch.module, name), True


def constant_assignment(launch: "LaunchNode", name: str) -> cst.Assign | None:
    """Where the name a launch reads is set, as ``name = value``: its own assignment, or its element of a tuple."""
    return launch_assignment(launch, name)[0] or unpacked_constant(launch, name)


def unpacked_constant(launch: "LaunchNode", name: str) -> cst.Assign | None:
    """``BT, BK, BV = 64, 32, 32`` in the launch's host function (or module), as an ``BT = 64`` whose value is the
    element in the tree: rewriting that value (``set_constexpr``) edits the tuple in place. None unless the tuple
    is the name's only binding in the scope the launch reads it from."""
    scope = launch.host if launch.host is not None and _binds(launch.host, name) else launch.module
    value = assigned_value(scope, name)
    return cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=value) if value is not None else None


def statement_holding(root: cst.CSTNode, small: cst.CSTNode) -> cst.SimpleStatementLine | None:
    """The statement line (at any depth) that holds the small statement ``small``."""
    found: list[cst.SimpleStatementLine] = []

    class V(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
            if any(b is small for b in node.body):
                found.append(node)
            return False

    root.visit(V())
    return found[0] if found else None


def kwarg(call: cst.Call, name: str) -> cst.Arg | None:
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


EXACT_PRECISION = ('"ieee"', "'ieee'")


def exact_dot(call: cst.Call) -> bool:
    """``tl.dot(..., input_precision="ieee")`` or the older ``allow_tf32=False``: fp32 products on FMA units."""
    precision, allow = kwarg(call, "input_precision"), kwarg(call, "allow_tf32")
    return (precision is not None and code(precision.value) in EXACT_PRECISION) or (
        allow is not None and code(allow.value) == "False")


def set_kwarg(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """``call`` with keyword ``name`` set to ``value`` (replaced in place, or appended last)."""
    args = list(call.args)
    for i, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == name:
            args[i] = arg.with_changes(value=value)
            return call.with_changes(args=args)
    new = cst.Arg(value=value, keyword=cst.Name(name), equal=cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
    if args:
        last = args[-1]
        new = new.with_changes(comma=last.comma)
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(new)
    return call.with_changes(args=args)


def remove_kwargs(call: cst.Call, names: set[str]) -> cst.Call:
    args = list(call.args)
    keep = [a for a in args if not (a.keyword is not None and a.keyword.value in names)]
    if keep and args and keep[-1] is not args[-1]:
        keep[-1] = keep[-1].with_changes(comma=args[-1].comma)
    return call.with_changes(args=keep)


# Tensor methods that keep a value's shape (``x.to(tl.float32)``, ``x.cast(...)``).
SHAPE_METHODS = frozenset({"to", "cast"})


def canonical_name(node: cst.CSTNode, prefix: dict[str, str]) -> str:
    """``tl.math.exp`` -> ``triton.language.math.exp``: a dotted name with the file's import spelling resolved
    (``prefix`` is the analysis's ``names.prefix``)."""
    parts = code(node).split(".")
    return ".".join([prefix.get(parts[0], parts[0]), *parts[1:]])


def names_in(node: cst.CSTNode) -> set[str]:
    """Every name a node reads or assigns, plus string keys of subscripts (``META["BLOCK"]``)."""
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.add(n.value)

        def visit_SimpleString(self, n: cst.SimpleString) -> None:
            found.add(n.evaluated_value if isinstance(n.evaluated_value, str) else "")

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)  # ``tl.erf`` reads ``tl``, not a name ``erf``
            return False

        def visit_Arg(self, n: cst.Arg) -> bool:
            n.value.visit(self)  # keyword names are not reads
            return False

    node.visit(V())
    return found


def heuristics_entry(kdef: cst.FunctionDef, name: str) -> tuple[cst.Decorator, cst.Arg, cst.DictElement] | None:
    """The ``@triton.heuristics({...})`` decorator whose literal dict sets ``name``, its dict argument and that entry."""
    for decorator in kdef.decorators:
        call = decorator.decorator
        if not (isinstance(call, cst.Call) and code(call.func).endswith("heuristics")):
            continue
        arg = kwarg(call, "values") or next((a for a in call.args if a.keyword is None), None)
        if arg is None or not isinstance(arg.value, cst.Dict):
            continue
        for element in arg.value.elements:
            if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString) \
                    and element.key.evaluated_value == name:
                return decorator, arg, element
    return None


def bound_names(node: cst.CSTNode | list) -> set[str]:
    """Every name ``node`` (or each node of a list) binds at any depth: assignments, augmented and annotated ones,
    loop targets."""
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_AssignTarget(self, n: cst.AssignTarget) -> None:
            found.update(names_in(n.target))

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            found.update(names_in(n.target))

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            found.update(names_in(n.target))

        def visit_For(self, n: cst.For) -> None:
            found.update(names_in(n.target))

    for one in node if isinstance(node, list) else [node]:
        one.visit(V())
    return found


def assignment_counts(kdef: cst.FunctionDef) -> dict[str, int]:
    """How many statements of the kernel bind each name (assignments, augmented ones, loop targets); parameters do
    not count (``fusion.binding_counts`` counts them, and every other kind of binding)."""
    counts: dict[str, int] = {}

    class V(cst.CSTVisitor):
        def _add(self, target: cst.CSTNode) -> None:
            for name in names_in(target):
                counts[name] = counts.get(name, 0) + 1

        def visit_AssignTarget(self, n: cst.AssignTarget) -> None:
            self._add(n.target)

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            self._add(n.target)

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            self._add(n.target)

        def visit_For(self, n: cst.For) -> None:
            self._add(n.target)

    kdef.body.visit(V())
    return counts


LOG2E = "1.4426950408889634"  # log2(e): exp(x) = exp2(x * LOG2E), the cheap (flush-to-zero) exponent


def times_log2e(node: cst.BaseExpression) -> cst.BaseExpression:
    """``node * LOG2E``, parenthesizing ``node`` unless it binds at least as tightly as ``*``."""
    product = isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply)
    tight = isinstance(node, cst.Name | cst.Call | cst.Attribute | cst.Subscript | cst.Integer | cst.Float) or bool(node.lpar)
    left = node if product or tight else node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.BinaryOperation(left, cst.Multiply(whitespace_before=cst.SimpleWhitespace(" "),
                                                  whitespace_after=cst.SimpleWhitespace(" ")), cst.Float(LOG2E))


def flat(node: cst.CSTNode | str) -> str:
    """A node's source (or a source string) without any whitespace, for comparing spellings."""
    return "".join((node if isinstance(node, str) else code(node)).split())


def is_call(node: cst.CSTNode, op: str, roots: frozenset[str]) -> bool:
    """Whether ``node`` calls ``<root>.op`` for one of triton.language's spellings ``roots``."""
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == op
            and code(node.func.value) in roots)


def broadcast_axis(node: cst.BaseExpression) -> tuple[cst.BaseExpression, int | None]:
    """``x[:, None]`` -> (x, 0), ``x[None, :]`` -> (x, 1), anything else -> (node, None) (through parentheses)."""
    node = unparen(node)
    if isinstance(node, cst.Subscript):
        index = flat(code(node)[len(code(node.value)):])
        if index == "[:,None]":
            return node.value, 0
        if index == "[None,:]":
            return node.value, 1
    return node, None


def first_free(taken: set[str], *choices: str) -> str:
    """The first of ``choices`` not in ``taken`` (ActionError when all are)."""
    name = next((n for n in choices if n not in taken), None)
    if name is None:
        raise ActionError(f"the names {', '.join(choices)} are all taken")
    return name


def unparen(node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` without its own parentheses (``(a & b)`` -> ``a & b``)."""
    return node.with_changes(lpar=[], rpar=[]) if getattr(node, "lpar", None) else node


def summands(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The terms of a sum, left to right, parentheses dropped: ``a + (b + c)`` -> a, b, c."""
    node = unparen(node)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return summands(node.left) + summands(node.right)
    return [node]


def conjuncts(mask: cst.BaseExpression | None) -> list[cst.BaseExpression]:
    """``(a) & (b) & c`` -> [a, b, c], each without its parentheses ([] for no mask)."""
    if mask is None:
        return []
    if isinstance(mask, cst.BinaryOperation) and isinstance(mask.operator, cst.BitAnd):
        return conjuncts(mask.left) + conjuncts(mask.right)
    return [unparen(mask)]


def divisible_at_launch(launch: LaunchNode, kernel: Kernel, size: str, block: str) -> tuple[str, bool]:
    """(``N % BLOCK == 0`` spelled with what ``launch`` passes for ``size`` and ``block``, whether the block is a
    literal there): the value of an ``EVEN_*`` constexpr the launch computes (mask_free_k's EVEN_K, the flash
    kernel's EVEN_N)."""
    if any(a.star for a in launch.call.args):
        raise ActionError("a launch passes *args or **kwargs")

    def passed(param: str) -> cst.BaseExpression | None:
        arg = kwarg(launch.call, param)
        if arg is not None:
            return arg.value
        p = kernel.param(param)
        positional = [a for a in launch.call.args if a.keyword is None]
        return positional[p.index].value if p is not None and p.index < len(positional) else None

    def operand(node: cst.BaseExpression) -> str:
        text = code(unparen(node)).strip()
        simple = isinstance(unparen(node), cst.Name | cst.Attribute | cst.Subscript | cst.Call | cst.Integer)
        return text if simple and "\n" not in text else f"({' '.join(text.split())})"

    size_node = passed(size)
    if size_node is None:
        raise ActionError(f"a launch does not pass {size}")
    block_node = passed(block)
    if block_node is None:
        default = kernel.param(block).default_value
        if not isinstance(default, int):
            raise ActionError(f"a launch leaves {block} to a default that is not an integer")
        return f"{operand(size_node)} % {default} == 0", True
    return f"{operand(size_node)} % {operand(block_node)} == 0", isinstance(unparen(block_node), cst.Integer)


def launch_statement(launch: LaunchNode) -> cst.SimpleStatementLine | None:
    """The top-level statement of the launch's host function that holds the launch (None when nested deeper)."""
    if launch.host is None:
        return None
    return next((s for s in launch.host.body.body if isinstance(s, cst.SimpleStatementLine)
                 and launch.call in calls_in(s)), None)


def calls_in(node: cst.CSTNode) -> list[cst.Call]:
    """Every call under ``node`` (outer calls before the calls in their arguments)."""
    found: list[cst.Call] = []

    class V(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            found.append(call)

    node.visit(V())
    return found


def count_name(node: cst.CSTNode, name: str) -> int:
    """How often ``name`` is read or assigned in ``node`` as a variable: keyword names of calls and attribute
    names do not count (``tl.num_programs`` is no use of a variable ``num_programs``)."""
    count = 0

    class V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            nonlocal count
            count += n.value == name

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)
            return False

        def visit_Arg(self, n: cst.Arg) -> bool:
            n.value.visit(self)
            return False

    node.visit(V())
    return count


def grid_expression(launch: LaunchNode) -> cst.BaseExpression:
    """The grid of a launch, following ``grid = ...`` in the host function (or the module), and a grid
    function ``def grid(meta): return (...)`` defined there to the tuple it returns."""
    grid = launch.call.func.slice[0].slice.value  # type: ignore[union-attr]
    if isinstance(grid, cst.Name):
        assign = host_assignment(launch.host, grid.value) or launch_assignment(launch, grid.value)[0]
        if assign is not None:
            return assign.value
        returned = _grid_function_return(launch, grid.value)
        if returned is not None:
            return returned
    return grid


def _grid_function_return(launch: LaunchNode, name: str) -> cst.BaseExpression | None:
    """What ``def name(meta): return EXPR`` returns, for a one-statement function defined in the host
    function (or at module level); None otherwise."""
    for scope in (launch.host, launch.module):
        if scope is None:
            continue
        body = scope.body.body if isinstance(scope, cst.FunctionDef) else scope.body
        defs = [s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == name]
        if len(defs) != 1:
            continue
        fn = defs[0]
        statements = [s for s in fn.body.body if not is_docstring(s)]
        if (len(fn.params.params) == 1 and len(statements) == 1 and isinstance(statements[0], cst.SimpleStatementLine)
                and len(statements[0].body) == 1 and isinstance(statements[0].body[0], cst.Return)
                and statements[0].body[0].value is not None):
            return statements[0].body[0].value
        return None
    return None


def module_import_name(module: cst.Module, dotted: str) -> str | None:
    """The name a top-level ``import <dotted>`` (``as x``) binds in the file, or None."""
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if code(alias.name) == dotted:
                        return alias.asname.name.value if alias.asname is not None else dotted
    return None


def insert_after_imports(module: cst.Module, source: str) -> cst.Module | None:
    """``source``'s statements after the file's last top-level import, two blank lines around them (comments above
    the statement that followed stay with it); None when the file has no top-level import."""
    two = [cst.EmptyLine(), cst.EmptyLine()]
    added = [statement.with_changes(leading_lines=two) for statement in parse(source).body]
    statements = list(module.body)
    last_import = max((i for i, s in enumerate(statements) if isinstance(s, cst.SimpleStatementLine)
                       and all(isinstance(b, cst.Import | cst.ImportFrom) for b in s.body)), default=None)
    if last_import is None:
        return None
    following = statements[last_import + 1:]
    if following:
        comments = [line for line in following[0].leading_lines if line.comment is not None]
        following[0] = following[0].with_changes(leading_lines=two + comments)
    return module.with_changes(body=statements[:last_import + 1] + added + following)


def is_docstring(statement: cst.CSTNode) -> bool:
    """True for a statement that is only a string (a docstring, also an implicitly concatenated one)."""
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString))


def grid_source_names(launch: LaunchNode, depth: int = 3) -> set[str]:
    """The names a launch's grid is computed from, through the host's single assignments:
    ``num_blocks = triton.cdiv(n, BLOCK)`` then ``kernel[(num_blocks,)]`` reads ``BLOCK``."""
    names = names_in(grid_expression(launch))
    frontier = set(names)
    for _ in range(depth):
        following: set[str] = set()
        for name in frontier:
            assign = host_assignment(launch.host, name)
            if assign is not None:
                following |= names_in(assign.value) - names
        if not following:
            break
        names |= following
        frontier = following
    return names


def grid_shared(launch: LaunchNode, kernel_name: str) -> bool:
    """True when the launch's grid is a name that something besides this kernel's launches reads."""
    grid = launch.call.func.slice[0].slice.value  # type: ignore[union-attr]
    if not isinstance(grid, cst.Name):
        return False
    assign, at_module = launch_assignment(launch, grid.value)
    scope = launch.module if at_module or launch.host is None else launch.host
    if assign is None or scope is None:
        return True
    _kdef, launches = locate(launch.module, kernel_name) if launch.module is not None else (None, [launch])
    own = sum(1 for l in launches if grid_name(l) == grid.value and (at_module or l.host is launch.host))
    return count_name(scope, grid.value) != 1 + own


def grid_name(launch: LaunchNode) -> str | None:
    grid = launch.call.func.slice[0].slice.value  # type: ignore[union-attr]
    return grid.value if isinstance(grid, cst.Name) else None


def arg_param(arg: cst.Arg, call: cst.Call, kernel: Kernel) -> str | None:
    """The kernel parameter (or launch option) an argument of a launch binds; None past ``*args``."""
    if arg.keyword is not None:
        return arg.keyword.value
    index = 0
    for other in call.args:
        if other.star:
            return None
        if other is arg:
            return kernel.params[index].name if index < len(kernel.params) else None
        if other.keyword is None:
            index += 1
    return None


def launch_sources(launch: LaunchNode, kernel: Kernel) -> dict[str, str]:
    """Kernel parameter -> whitespace-free source of what this launch passes for it."""
    out: dict[str, str] = {}
    positional = 0
    for arg in launch.call.args:
        if arg.star:
            break
        if arg.keyword is not None:
            out[arg.keyword.value] = "".join(code(arg.value).split())
        else:
            if positional < len(kernel.params):
                out[kernel.params[positional].name] = "".join(code(arg.value).split())
            positional += 1
    return out


def grid_literal_sites(launch: LaunchNode, kernel: Kernel, values: dict[str, int | None],
                       shared_ok: bool = False) -> tuple[list, str | None]:
    """The literals of the launch's grid that repeat a block size (``_grid.literal_sites``), or why not.

    With ``shared_ok`` the sites of a ``grid`` name that other kernels' launches read too are given:
    the caller then rewrites a private copy of the grid at this launch (``private_grid``), never the shared one.
    """
    from ._grid import literal_sites

    known = {k: v for k, v in values.items() if isinstance(v, int) and is_block_name(k)}
    if not known:
        return [], None
    sites, why = literal_sites(grid_expression(launch), kernel, known, launch_sources(launch, kernel))
    if sites and not shared_ok and grid_shared(launch, kernel.name):
        return [], "the grid literal is shared with another launch"
    return sites, why


def private_grid(launch: LaunchNode, replace: dict[int, cst.CSTNode]) -> cst.BaseExpression:
    """A copy of the launch's grid expression with nodes (by identity) replaced, to write at this launch only."""

    class Copy(cst.CSTTransformer):
        def on_leave(self, original_node, updated_node):
            return replace.get(id(original_node), updated_node)

    return grid_expression(launch).visit(Copy())


def launch_values(launch: LaunchNode, kernel: Kernel) -> dict[str, int | None]:
    """The block-size values this launch binds (literal, host or module constant, or the kernel default)."""
    out: dict[str, int | None] = {}
    for p in kernel.params:
        if p.kind != "constexpr" or not is_block_name(p.name):
            continue
        how, node = binding_of(launch, kernel, p.name)
        if how == "literal":
            out[p.name] = int(node.value.evaluated_value)
        elif how in ("host", "dict"):
            out[p.name] = int(node.value.evaluated_value)
        elif how == "param":
            out[p.name] = int(node.default.evaluated_value)
        elif how == "callers":
            out[p.name] = node.value
        elif how == "default":
            out[p.name] = p.default_value if isinstance(p.default_value, int) else None
        else:
            out[p.name] = None
    return out


# ---- numbers the budget checks need --------------------------------------------------------------


def torch_dtype_sizes(text: str) -> list[int]:
    """The sizes in bytes of the torch floating types the file names (``torch.float16`` -> 2), in order."""
    return [TORCH_DTYPE_BYTES[m] for m in re.findall(r"torch\.(float64|float32|float16|bfloat16|half|float8)\w*", text)]


def element_bytes(text: str) -> int:
    """The widest torch element type the file's host code uses (4 when it names none)."""
    return max(torch_dtype_sizes(text), default=4)


def dot_shared_bytes(bm: int, bn: int, bk: int, stages: int, elem: int) -> int:
    """Shared memory a pipelined ``tl.dot`` loop stages (``triton_rules``, both operands ``elem`` bytes)."""
    return rules_dot_shared_bytes(bm, bn, bk, elem, elem, stages)


def staged_shared_bytes(bm: int, bn: int, bk: int, stages: int, elem: int, extra_tiles: int = 0) -> int:
    """``dot_shared_bytes`` plus the loop's other staged 2-D loads (``TilePlan.extra_staged_tiles``), each
    counted as the larger operand tile in fp32: their element types are not in the text. A W4A16 dev kernel's
    packed weights, scales and zeros took 475,136 bytes at 128x256x64 x 3 stages (sm_90 compile)."""
    return dot_shared_bytes(bm, bn, bk, stages, elem) + extra_tiles * max(bm * bk, bk * bn) * 4 * stages


def is_pow2(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0 and v & (v - 1) == 0


# ---- block-size parameters and how each launch binds them ----------------------------------------
@dataclass
class BlockParam:
    name: str
    role: str  # "m" | "n" | "k" | "1d"
    value: int | None  # current value (the same at every launch)
    tunable: bool
    reason: str = ""
    # Constexpr flags the launches compute as ``n % <the block's host constant> == 0`` that guard unmasked accesses
    # (``if EVEN_N: k = tl.load(k_ptrs)``): safe for tiling, which changes that constant, but not for autotune.
    even_flags: tuple[str, ...] = ()


@dataclass
class TilePlan:
    """The kernel's block parameters and whether tiling can change them safely."""

    params: dict[str, BlockParam] = field(default_factory=dict)
    num_warps: int = DEFAULT_NUM_WARPS
    num_stages: int | None = None
    has_dot: bool = False
    exact_dot: bool = False  # a tl.dot pinned to IEEE fp32 (FMA units: FMA_TILES, not the tensor cores' tiles)
    warps_settable: bool = False  # every launch sets num_warps as a constant (or not at all)
    stages_settable: bool = False  # every launch sets num_stages as a constant (or not at all)
    # 2-D loads in the kernel's loops besides tl.dot's two operands (a dequantizing matmul's packed
    # weights, scales and zeros): the pipeliner stages each of them in shared memory too.
    extra_staged_tiles: int = 0

    def values(self) -> dict[str, int | None]:
        return {p.name: p.value for p in self.params.values()}


# flash-linear-attention's spelling of block sizes: BT (time), BK / BV (key and value dims), BD, BS, BC, BM, BN.
_SHORT_BLOCK = re.compile(r"^B[TKVDSCMNH]$")


def is_block_name(name: str) -> bool:
    upper = name.upper()
    return "BLOCK" in upper or "TILE" in upper or _SHORT_BLOCK.match(name) is not None


def block_role(name: str) -> str:
    upper = name.upper()
    for role in ("M", "N", "K"):
        if upper.endswith("_" + role) or upper.endswith("SIZE_" + role):
            return role.lower()
    if _SHORT_BLOCK.match(name) and name[1] in "MN":
        return name[1].lower()  # BM, BN; fla's BK is a key-dimension block, not a matmul's K loop
    return "1d"


_ACCUMULATOR = re.compile(r"\btl\.zeros\(\s*[\[(]\s*(\w+)\s*,\s*(\w+)\s*,?\s*[\])]")


def dot_block_roles(kernel: Kernel, text: str) -> dict[str, str]:
    """The matmul role of each block size of a ``tl.dot`` kernel: by name (``BLOCK_M``, ``BN``) where the names
    say it, else from how the kernel uses them: the accumulator ``tl.zeros([BT, BV])`` is (m, n), and the one
    other block a loop steps by is k (flash-linear-attention's ``BT``/``BV``/``BK``, whose BK is a K loop here)."""
    blocks = [p.name for p in kernel.params if p.kind == "constexpr" and is_block_name(p.name)]
    by_name = {name: block_role(name) for name in blocks}
    if {"m", "n", "k"} <= set(by_name.values()) or ({"m", "n"} <= set(by_name.values()) and
                                                    not any(loop_tiled(kernel, b) for b in blocks)):
        return by_name
    shapes = {m.groups() for m in _ACCUMULATOR.finditer(kernel.def_span.text(text))}
    shapes = {s for s in shapes if s[0] in blocks and s[1] in blocks and s[0] != s[1]}
    stepped = [b for b in blocks if loop_tiled(kernel, b) and all(b not in s for s in shapes)]
    if len(shapes) != 1 or len(stepped) != 1:
        return by_name
    (m, n), = shapes
    return {**by_name, m: "m", n: "n", stepped[0]: "k"}


def loop_tiled(kernel: Kernel, param: str) -> bool:
    """True when some loop steps over a dimension by ``param``.

    ``range(0, K, BLOCK_K)``, ``range(K, 0, -BLOCK_K)``, or a count of blocks
    (``range(0, tl.cdiv(K, BLOCK_K))``, ``range(tl.cdiv(K, BLOCK_K))``: the tutorial's K loop).
    """
    cdiv = re.compile(rf"^(?:\w+\.)*cdiv\(\s*\w+\s*,\s*{re.escape(param)}\s*\)$")  # tl., tl2., triton.
    for loop in kernel.loops:
        if loop.kind not in ("range", "tl.range"):
            continue
        args = [a.strip() for a in loop.iter_args]
        if len(args) == 3 and args[2] in (param, f"-{param}"):
            return True
        if (len(args) == 1 and cdiv.match(args[0])) or (len(args) == 2 and args[0] == "0" and cdiv.match(args[1])):
            return True
    return False


def block_derived_names(kernel: Kernel, text: str, seeds: set[str] | None = None,
                        stops: frozenset[str] = frozenset()) -> set[str]:
    """Local names whose value depends on ``seeds`` (default: any block size or ``tl.arange``), transitively; the
    assignments of ``stops`` pass nothing on (a caller that knows their range decides whether to seed them)."""
    import ast

    tree = ast.parse(kernel.def_span.text(text))  # starts at ``def``: deeper body indentation is fine
    assigns: list[tuple[set[str], set[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AugAssign | ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, ast.For):
            targets, value = [node.target], node.iter
        else:
            continue
        written = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        read = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} | {n.attr for n in ast.walk(value) if isinstance(n, ast.Attribute)}
        if written and written <= stops:
            continue
        assigns.append((written, read))
    tainted = set(seeds) if seeds is not None else \
        {p.name for p in kernel.params if p.kind == "constexpr" and is_block_name(p.name)} | {"arange"}
    changed = True
    while changed:
        changed = False
        for written, read in assigns:
            if read & tainted and not written <= tainted:
                tainted |= written
                changed = True
    return tainted


def all_accesses_masked(kernel: Kernel, text: str | None = None) -> bool:
    """Every load/store whose address depends on a block size is masked (scalar accesses need none)."""
    tainted = block_derived_names(kernel, text) if text is not None else None
    for call in kernel.calls_of("load", "store"):
        if call.has_mask or "boundary_check" in call.kwargs:
            continue
        pointer = call.pointer or ""
        if tainted is None or "arange" in pointer or any(re.search(rf"\b{re.escape(n)}\b", pointer) for n in tainted):
            return False
    return True


def block_is_tile_axis(analysis: FileAnalysis, kernel: Kernel, block: str) -> bool:
    """``block`` sizes one axis of a 2-D tile some load or store indexes (``offs[:, None]``), in the kernel model."""
    model = kernel_model(analysis, kernel)
    symbol = model.params.get(block)
    return symbol is not None and any(
        len(access.dims) >= 2 and any(symbol in model.aranges[a].size.free_symbols
                                      for dim in access.dims for a in dim if a in model.aranges)
        for access in model.accesses)


def accesses_masked_for(kernel: Kernel, text: str, block: str, grid_counts_it: bool,
                        guarded_lines: frozenset[int] = frozenset(), launch: LaunchNode | None = None,
                        model: KernelModel | None = None) -> bool:
    """Every load/store whose address a new value of ``block`` could move is masked.

    An unmasked access that reads neither ``block`` nor anything derived from it (a head vector
    ``tl.arange(0, HEAD_SIZE)`` beside a ``BLOCK_T`` loop) stays where it is. When the grid counts
    blocks, the program ids move too, so accesses derived from ``tl.program_id`` count as well, except
    the other factor of a flat program id split by ``launch``'s grid (``split_program_ids``).
    Accesses on ``guarded_lines`` (``even_guarded_lines``) count as masked.
    """
    seeds = {block} | ({"program_id"} if grid_counts_it else set())
    stops: frozenset[str] = frozenset()
    split = split_program_ids(model, kernel, block, launch) if grid_counts_it and launch is not None and model is not None else None
    if split is not None:
        # ``pid_m = pid // num_pid_n``, ``pid_n = pid % num_pid_n`` over a grid of ``cdiv(M, BM) * cdiv(N, BN)``: a new
        # BN moves pid_n's range only, a new BM pid_m's only (vLLM's fused_moe reads expert_ids[pid_m] unmasked).
        quotient, remainder, by_block = split
        seeds |= {remainder} if by_block else {quotient}
        stops = frozenset({quotient, remainder})
    tainted = block_derived_names(kernel, text, seeds, stops)
    for call in kernel.calls_of("load", "store"):
        if call.has_mask or "boundary_check" in call.kwargs or call.span.start.line in guarded_lines:
            continue
        pointer = call.pointer or ""
        if any(re.search(rf"\b{re.escape(n)}\b", pointer) for n in tainted):
            return False
    return True


def split_program_ids(model: KernelModel, kernel: Kernel, block: str, launch: LaunchNode) -> tuple[str, str, bool] | None:
    """(quotient, remainder, whether ``block`` sets the divisor) of a flat program id split in two.

    The kernel model has names bound once to ``pid // C`` and ``pid % C`` with ``C = cdiv(X, B)`` (however spelled),
    and the launch's grid is one product ``cdiv(A, B2) * cdiv(Y, B)`` (either order; ``B`` by name or ``META["B"]``)
    whose divisor factor counts the same blocks: ``Y`` is what the launch passes for ``X``. Then ``r`` ranges over
    ``C`` and ``q`` over the other factor, whichever block changes. None for anything else (a grouped ``GROUP_M``
    order, three-way splits, a 2-D grid).
    """
    parts = {p.name: p.expr for p in model.parts if p.axis == 0 and model.single_binding(p.name) is not None}
    pid = model.program_ids.get(0)
    splits = []
    for q, quotient in parts.items():
        if not isinstance(quotient, sp.floor):
            continue
        numerator, divisor = quotient.args[0].as_numer_denom()
        remainders = [r for r, e in parts.items() if isinstance(e, sp.Mod) and e.args == (pid, divisor)]
        if numerator == pid and isinstance(divisor, sp.ceiling) and len(remainders) == 1:
            size, divisor_block = divisor.args[0].as_numer_denom()
            if size.is_Symbol and divisor_block.is_Symbol and kernel.param(size.name) is not None \
                    and getattr(kernel.param(divisor_block.name), "kind", None) == "constexpr":
                splits.append((q, remainders[0], size.name, divisor_block.name))
    if len(splits) != 1:
        return None
    quotient, remainder, size, divisor_block = splits[0]
    grid = host_grid(code(grid_expression(launch)))
    if grid is None or len(grid) != 1 or grid[0] is None or len(sp.Mul.make_args(grid[0])) != 2:
        return None
    sources = launch_sources(launch, kernel)
    passed = host_expression(sources.get(size, ""))
    blocks = {sp.Symbol(divisor_block, integer=True), host_expression(sources.get(divisor_block, ""))} - {None}
    factors = sp.Mul.make_args(grid[0])
    by_divisor = [f for f in factors if passed is not None and any(f == sp.ceiling(passed / b) for b in blocks)]
    if len(by_divisor) != 1:
        return None
    other = factors[1 - factors.index(by_divisor[0])]
    if block == divisor_block:
        return quotient, remainder, True
    if block in {s.name for s in other.free_symbols}:
        return quotient, remainder, False
    return None


def even_flags_for(launch: LaunchNode, kernel: Kernel, host_var: str) -> list[str]:
    """The kernel's constexpr flags this launch computes as ``<size> % host_var == 0`` (``EVEN_N=n % BLOCK == 0``)."""
    flags = []
    for p in kernel.params:
        if p.kind != "constexpr":
            continue
        how, node = binding_of(launch, kernel, p.name)
        value = getattr(node, "value", None) if how == "other" else None
        if isinstance(value, cst.Comparison) and len(value.comparisons) == 1 \
                and isinstance(value.comparisons[0].operator, cst.Equal) and flat(value.comparisons[0].comparator) == "0":
            left = unparen(value.left)
            if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Modulo) \
                    and flat(left.right) == host_var:
                flags.append(p.name)
    return flags


def even_guarded_lines(kernel: Kernel, text: str, flags: list[str]) -> frozenset[int]:
    """The lines (0-based, of ``text``) inside the ``if FLAG:`` branches of ``kernel`` for each of ``flags``."""
    import ast

    if not flags:
        return frozenset()
    first = kernel.def_span.start.line
    lines: set[int] = set()
    for node in ast.walk(ast.parse(kernel.def_span.text(text))):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id in flags:
            for st in node.body:
                lines.update(range(first + st.lineno - 1, first + st.end_lineno))
    return frozenset(lines)


def _unknown_block_reason(launches: list[LaunchNode], kernel: Kernel, param: str) -> str:
    """Why ``param`` has no single constant value: the launches differ, or one computes it (quoted)."""
    for launch in launches:
        how, node = binding_of(launch, kernel, param)
        if how != "other" or node is None:
            continue
        value = node.value  # type: ignore[union-attr]
        if isinstance(value, cst.Name):
            assign, _at_module = launch_assignment(launch, value.value)
            if assign is None:
                return f"the launch passes `{value.value}`, set at run time; tiling changes constant block sizes only"
            value = assign.value
        shown = code(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return f"the launch computes it at run time (`{shown}`); tiling changes constant block sizes only"
    return "the block size differs between launches or is not a constant"


def binding_of(launch: LaunchNode, kernel: Kernel, param: str) -> tuple[str, cst.CSTNode | None]:
    """How a launch sets a constexpr: ("literal"|"host"|"param"|"default"|"other", node to rewrite).

    "host" is a constant assignment in the host function or module, "param" a helper parameter's
    integer default that every caller keeps (``def _launch(x, BLOCK=1024)``), "callers" a helper
    parameter every caller passes the same literal (a ``CallerLiterals``).
    """
    arg = kwarg(launch.call, param)
    if arg is None:
        p = kernel.param(param)
        positional = [a for a in launch.call.args if a.keyword is None and a.star == ""]
        starred = next((i for i, a in enumerate(launch.call.args) if a.star == "*"), None)
        if p is not None and starred is not None and p.index >= starred:
            # Past a ``*args`` positions say nothing, but a ``**config`` that names the parameter sets it (the star
            # cannot reach it then: Python refuses two values for one parameter).
            return _spread_binding(launch, param) or ("other", launch.call.args[starred])
        if p is not None and p.index < len(positional):
            arg = positional[p.index]
    if arg is None:
        return _spread_binding(launch, param) or ("default", None)
    if isinstance(arg.value, cst.Integer):
        return "literal", arg
    if isinstance(arg.value, cst.Name):
        assign = constant_assignment(launch, arg.value.value)
        if assign is not None and isinstance(assign.value, cst.Integer):
            return "host", assign
        param = param_default(launch, arg.value.value)
        if param is not None:
            return "param", param
        callers = caller_literals(launch, arg.value.value)
        if callers is not None:
            return "callers", callers  # type: ignore[return-value]
    return "other", arg


def _spread_binding(launch: LaunchNode, param: str) -> tuple[str, cst.CSTNode | None] | None:
    """How a ``**config`` of the launch sets ``param`` (``_dict_binding``), None when none names it."""
    for spread in (a for a in launch.call.args if a.star == "**"):
        how, node = _dict_binding(launch, spread, param)
        if how is not None:
            return how, node
    return None


def _dict_binding(launch: LaunchNode, spread: cst.Arg, param: str) -> tuple[str | None, cst.CSTNode | None]:
    """How ``**config`` sets ``param`` (vLLM's ``kernel[grid](..., **config)``): ("dict", its ``"param": 64`` element)
    for a literal dict the host binds once, None when that dict does not name it, "other" when it is not known."""
    if not isinstance(spread.value, cst.Name):
        return "other", spread
    name = spread.value.value
    assign, _at_module = launch_assignment(launch, name)
    if assign is None or not isinstance(assign.value, cst.Dict) or _mutated(launch.host or launch.module, name):
        return "other", spread
    for element in assign.value.elements:
        if not isinstance(element, cst.DictElement) or not isinstance(element.key, cst.SimpleString):
            return "other", spread  # ``**other`` inside, or a computed key: it may name the parameter
        if element.key.evaluated_value == param:
            return ("dict" if isinstance(element.value, cst.Integer) else "other"), element
    return None, None


def _mutated(root: cst.CSTNode | None, name: str) -> bool:
    """Whether ``root`` changes the dict ``name`` after binding it (``name["K"] = v``, ``del name["K"]``,
    ``name.update(...)``): the libcst twin of the analysis' ``parse._dict_mutated``, which must agree with it."""
    if root is None:
        return False
    found = []

    def subscript_of_name(target: cst.BaseExpression) -> bool:
        return isinstance(target, cst.Subscript) and code(target.value) == name

    class V(cst.CSTVisitor):
        def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
            if subscript_of_name(node.target):
                found.append(node)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if subscript_of_name(node.target):
                found.append(node)

        def visit_Del(self, node: cst.Del) -> None:
            if subscript_of_name(node.target):
                found.append(node)

        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Attribute) and code(node.func.value) == name and \
                    node.func.attr.value in DICT_MUTATORS:
                found.append(node)

    root.visit(V())
    return bool(found)


def param_default(launch: LaunchNode, name: str) -> cst.Param | None:
    """``def _launch(x, BLOCK=1024)``: a helper's parameter whose integer default every caller in the file keeps."""
    found = _helper_param(launch, name)
    if found is None or not isinstance(found[1].default, cst.Integer):
        return None
    index, _param, calls = found
    for call in calls:
        if _passed(call, name, index) is not None:
            return None
    return found[1]


@dataclass
class CallerLiterals:
    """``def _launch(x, block)`` called only as ``_launch(x, 1024)``: the literal every caller passes."""

    param: cst.Param
    args: list[cst.Arg]  # each caller's argument for the parameter, all the same integer

    @property
    def value(self) -> int:
        return int(self.args[0].value.evaluated_value)  # type: ignore[union-attr]


def caller_literals(launch: LaunchNode, name: str) -> CallerLiterals | None:
    """The helper parameter ``name`` when every call of the helper in the file passes it the same integer
    literal (and nothing calls the helper another way)."""
    found = _helper_param(launch, name)
    if found is None:
        return None
    index, param, calls = found
    args = [_passed(call, name, index) for call in calls]
    if not args or any(a is None or not isinstance(a.value, cst.Integer) for a in args):
        return None
    values = {int(a.value.evaluated_value) for a in args}  # type: ignore[union-attr]
    return CallerLiterals(param, args) if len(values) == 1 else None  # type: ignore[arg-type]


def _helper_param(launch: LaunchNode, name: str) -> tuple[int | None, cst.Param, list[cst.Call]] | None:
    """(position, parameter, every call of the helper) for a parameter of the launch's host function that
    the function never rebinds; None when the helper is also used other than by direct calls."""
    host = launch.host
    if host is None or launch.module is None or any_assignment(host, name) is not None:
        return None
    params = host.params
    index, param = next(((i, p) for i, p in enumerate([*params.posonly_params, *params.params]) if p.name.value == name), (None, None))
    if param is None:
        param = next((p for p in params.kwonly_params if p.name.value == name), None)
    if param is None or _rebinds(host, name):
        return None
    helper = host.name.value
    calls: list[cst.Call] = []

    class V(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Name) and node.func.value == helper:
                calls.append(node)

    launch.module.visit(V())
    if count_name(launch.module, helper) != 1 + len(calls):  # passed around or called indirectly: unknown callers
        return None
    if any(a.star for call in calls for a in call.args):
        return None
    return index, param, calls


def _passed(call: cst.Call, name: str, index: int | None) -> cst.Arg | None:
    """The argument of ``call`` that binds parameter ``name`` (at ``index``), None when it is left to its default."""
    keyword = next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)
    if keyword is not None:
        return keyword
    positional = [a for a in call.args if a.keyword is None]
    return positional[index] if index is not None and len(positional) > index else None


def _rebinds(host: cst.FunctionDef, name: str) -> bool:
    finder = _Assignments(name, host)
    host.visit(finder)
    return bool(finder.found) or finder.rebound


# (id(analysis), id(module), kernel, shared) -> (analysis, module, plan): several actions of one request ask.
_PLANS: dict[tuple[int, int, str, bool], tuple[FileAnalysis, cst.Module, "TilePlan"]] = {}


_COLUMN_OF = re.compile(r"\[\s*:\s*,\s*None\s*\]")
_ROW_OF = re.compile(r"\[\s*None\s*,\s*:\s*\]")


def _two_d_access(call) -> bool:
    """A load whose address (or mask) broadcasts offsets both ways: ``x[:, None]`` and ``y[None, :]``."""
    source = " ".join([*call.args, *call.kwargs.values()])
    return bool(_COLUMN_OF.search(source) and _ROW_OF.search(source))


def tile_plan(analysis: FileAnalysis, kernel: Kernel, module: cst.Module | None = None, _shared: bool = True) -> TilePlan:
    """Which block parameters tiling may change, and why not for the others.

    A host constant that also sets another kernel's block (``BLOCK_SIZE`` passed to two launches)
    is only tunable when it is tunable for that kernel too (``_shared=False`` stops the recursion).
    """
    module = module or parse(analysis.text)
    key = (id(analysis), id(module), kernel.name, _shared)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is analysis and hit[1] is module:
        return copy.deepcopy(hit[2])
    plan = _tile_plan(analysis, kernel, module, _shared)
    if len(_PLANS) >= 16:
        _PLANS.clear()
    _PLANS[key] = (analysis, module, copy.deepcopy(plan))
    return plan


def _tile_plan(analysis: FileAnalysis, kernel: Kernel, module: cst.Module, _shared: bool) -> TilePlan:
    _kdef, launches = locate(module, kernel.name)
    sites: list[LaunchSite] = analysis.launches_of(kernel.name)
    plan = TilePlan(has_dot=bool(kernel.calls_of("dot")))
    plan.exact_dot = any(call.kwargs.get("input_precision") in EXACT_PRECISION or call.kwargs.get("allow_tf32") == "False"
                         for call in kernel.calls_of("dot"))
    warps = {s.num_warps or DEFAULT_NUM_WARPS for s in sites}
    plan.num_warps = warps.pop() if len(warps) == 1 else DEFAULT_NUM_WARPS
    stages = {s.num_stages for s in sites}
    plan.num_stages = stages.pop() if len(stages) == 1 else None
    plan.warps_settable = bool(launches) and all(option_settable(launch, "num_warps") for launch in launches)
    plan.stages_settable = bool(launches) and all(option_settable(launch, "num_stages") for launch in launches)
    if plan.has_dot:
        plan.extra_staged_tiles = max(0, len([call for call in kernel.calls_of("load") if call.loop_depth > 0
                                              and _two_d_access(call)]) - 2)
    masked = all_accesses_masked(kernel, analysis.text)
    descriptors = any("TensorDescriptor" in code(launch.host) for launch in launches if launch.host is not None)
    roles = dot_block_roles(kernel, analysis.text) if plan.has_dot else {}
    model = kernel_model(analysis, kernel)
    for p in kernel.params:
        if p.kind != "constexpr" or not is_block_name(p.name):
            continue
        values = {launch_values(launch, kernel).get(p.name) for launch in launches} or \
            {s.constexpr_values(kernel).get(p.name) for s in sites} or {p.default_value}
        value = values.pop() if len(values) == 1 else None
        bp = BlockParam(p.name, roles.get(p.name) or block_role(p.name), value if isinstance(value, int) else None, False)
        plan.params[p.name] = bp
        if kernel.is_autotuned:
            bp.reason = "the kernel is autotuned: its configs choose the block sizes"
            continue
        if p.name in kernel.heuristics:
            bp.reason = "@triton.heuristics computes this block size"
            continue
        if not launches:
            bp.reason = "no launch of the kernel in this file"
            continue
        if descriptors:
            bp.reason = "a host-side tensor descriptor fixes the block shape"
            continue
        if bp.value is None:
            bp.reason = _unknown_block_reason(launches, kernel, p.name)
            continue
        ok = True
        for launch in launches:
            how, node = binding_of(launch, kernel, p.name)
            grid_names = grid_source_names(launch)
            if how in ("host", "param", "callers"):
                host_var = (node.targets[0].target.value if how == "host"  # type: ignore[union-attr]
                            else node.param.name.value if how == "callers" else node.name.value)
                via_grid = host_var in grid_names or p.name in grid_names  # the constant, or META["BLOCK"]
                problem = _shared and _shared_constant_problem(analysis, module, kernel, launch, host_var)
                if problem:
                    bp.reason = problem
                    ok = False
                    break
            elif how in ("literal", "default", "dict"):
                via_grid = p.name in grid_names  # lambda META: ... META["BLOCK"]
                problem = _shared_dict_problem(analysis, kernel, launch) if how == "dict" else None
                if problem:
                    bp.reason = problem
                    ok = False
                    break
            else:
                bp.reason = "the launch computes the block size; tiling keeps computed sizes"
                ok = False
                break
            if not via_grid and bp.value in _ints_in(grid_expression(launch)):
                # ``(triton.cdiv(n, 64),)`` with ``BLOCK=64``: the grid literal is rewritten with the block.
                literal, why = grid_literal_sites(launch, kernel, launch_values(launch, kernel), shared_ok=True)
                if why:
                    bp.reason = why
                    ok = False
                    break
                via_grid = any(site.block == p.name for site in literal)  # else the literals are other blocks'

            if not via_grid and not loop_tiled(kernel, p.name):
                bp.reason = "neither the grid nor a loop is derived from this block size"
                ok = False
                break
            if not masked and not accesses_masked_for(kernel, analysis.text, p.name, via_grid, launch=launch, model=model):
                flags = even_flags_for(launch, kernel, host_var) if how == "host" else []
                guarded = even_guarded_lines(kernel, analysis.text, flags)
                if not guarded or not accesses_masked_for(kernel, analysis.text, p.name, via_grid, guarded, launch, model):
                    bp.reason = "a load or store has no mask, so a different block size could go out of bounds"
                    ok = False
                    break
                bp.even_flags = tuple(sorted(set(bp.even_flags) | set(flags)))
        bp.tunable = ok
    return plan


def option_settable(launch: LaunchNode, option: str) -> bool:
    """True when ``set_launch_option`` can set ``option`` at this launch."""
    arg = kwarg(launch.call, option)
    if arg is None or isinstance(arg.value, cst.Integer):
        return True
    if isinstance(arg.value, cst.Name):
        assign = constant_assignment(launch, arg.value.value)
        return assign is not None and isinstance(assign.value, cst.Integer)
    return False


def _shared_constant_problem(analysis: FileAnalysis, module: cst.Module, kernel: Kernel, launch: LaunchNode,
                             host_var: str) -> str | None:
    """Why changing ``host_var`` would be unsafe for another kernel launched with it (None if safe)."""
    _assign, at_module = launch_assignment(launch, host_var)
    if at_module:
        problem = _module_constant_problem(analysis, module, host_var)
        if problem:
            return problem
    elif launch.host is None:
        return None
    host_name = launch.host.name.value if launch.host is not None else None
    for other in analysis.kernels:
        if other.name == kernel.name:
            continue
        try:
            other_launches = locate(module, other.name)[1]
        except ActionError:  # defined twice (a factory): its launches cannot be told apart
            continue
        for other_launch in other_launches:
            if not at_module and other_launch.host is not launch.host:
                continue
            reads_in_grid = host_var in names_in(grid_expression(other_launch))
            if reads_in_grid and not any(code(a.value).strip() == host_var for a in other_launch.call.args):
                return f"{host_var} also sizes {other.name}'s grid, whose block does not follow it"
    for site in analysis.launches:
        if site.kernel == kernel.name or (not at_module and site.host_function != host_name):
            continue
        for arg in site.args:
            if arg.source.strip() != host_var:
                continue
            other = analysis.kernel(site.kernel)
            if other is None or arg.param is None:
                return f"{host_var} also sets an argument of {site.kernel}"
            other_param = tile_plan(analysis, other, module, _shared=False).params.get(arg.param)
            if other_param is None or not other_param.tunable:
                why = other_param.reason if other_param else f"{arg.param} is not a block size there"
                return f"{host_var} also sets {site.kernel}'s {arg.param}, which cannot change: {why}"
    return None


def spread_launches(analysis: FileAnalysis, kernel: Kernel) -> str | None:
    """The first ``**config`` a launch of ``kernel`` in this file passes (None when none does)."""
    return next((a.source for site in analysis.launches if site.kernel == kernel.name and site.file is None
                 for a in site.args if a.param is None and a.source.startswith("**")), None)


def _shared_dict_problem(analysis: FileAnalysis, kernel: Kernel, launch: LaunchNode) -> str | None:
    """Why editing the ``**config`` dict of ``launch`` would change another kernel's launch too (None if it does not)."""
    spreads = {code(a.value) for a in launch.call.args if a.star == "**"}
    host = launch.host.name.value if launch.host is not None else None
    for site in analysis.launches:
        if site.kernel != kernel.name and site.host_function == host and \
                any(re.fullmatch(rf"\*\*\s*{re.escape(name)}", a.source.strip()) for a in site.args for name in spreads):
            return f"the same config dict also launches {site.kernel}"
    return None


def _module_constant_problem(analysis: FileAnalysis, module: cst.Module, name: str) -> str | None:
    """Why a module-level block constant is not only launch arguments and grids (None when it is)."""
    # A function whose parameter has the same name (a kernel's ``BLOCK_SIZE: tl.constexpr``) reads its
    # own binding, not the constant.
    total = count_name(module, name) - sum(count_name(fn, name) for fn in _functions_binding(module, name))
    seen: dict[int, cst.CSTNode] = {}
    for k in analysis.kernels:
        try:
            _kdef, launches = locate(module, k.name)
        except ActionError:
            continue
        for launch in launches:
            seen[id(launch.call)] = launch.call
            grid = grid_expression(launch)
            if grid is not launch.call.func.slice[0].slice.value:  # type: ignore[union-attr]
                seen.setdefault(id(grid), grid)  # ``grid = ...`` outside the call
    inside = sum(count_name(node, name) for node in seen.values())
    if total != 1 + inside:
        return f"the module constant {name} is also used outside kernel launches"
    return None


def _functions_binding(module: cst.Module, name: str) -> list[cst.FunctionDef]:
    """The outermost functions of ``module`` that take a parameter called ``name``."""
    found: list[cst.FunctionDef] = []

    class V(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            if name in _param_names(node):
                found.append(node)
                return False
            return True

    module.visit(V())
    return found


def _ints_in(node: cst.CSTNode) -> set[int]:
    found: set[int] = set()

    class V(cst.CSTVisitor):
        def visit_Integer(self, n: cst.Integer) -> None:
            found.add(int(n.evaluated_value))

    node.visit(V())
    return found


def shared_bindings(launches: list[LaunchNode], kernel: Kernel, names: list[str]) -> list[set[str]]:
    """Groups of ``names`` (two or more) that one host constant or helper parameter sets at some launch
    (``BLOCK_M=BLOCK, BLOCK_N=BLOCK``)."""
    groups: list[set[str]] = []
    for launch in launches:
        by_node: dict[int, set[str]] = {}
        for name in names:
            how, node = binding_of(launch, kernel, name)
            if how in ("host", "dict") and node is not None:  # the value node: an element of an unpacked tuple is its own
                by_node.setdefault(id(node.value), set()).add(name)  # type: ignore[union-attr]
            elif how in ("param", "callers") and node is not None:  # a helper's parameter passed as both
                by_node.setdefault(id(node), set()).add(name)
        groups += [g for g in by_node.values() if len(g) > 1 and g not in groups]
    return groups


def set_constexpr(module: cst.Module, analysis: FileAnalysis, kernel: Kernel, values: dict[str, int]) -> cst.Module:
    """Rewrite every binding of the given constexprs (launch literal, host constant, or default)."""
    kdef, launches = locate(module, kernel.name)
    targets: dict[int, tuple[cst.CSTNode, cst.CSTNode]] = {}
    new_default: dict[str, int] = {}
    for group in shared_bindings(launches, kernel, list(values)):
        if len({values[name] for name in group}) > 1:
            raise ActionError(f"{' and '.join(sorted(group))} are set by one host constant: they cannot take different sizes")
    for name, value in values.items():
        for launch in launches:
            how, node = binding_of(launch, kernel, name)
            if how == "literal":
                targets[id(node)] = (node, node.with_changes(value=cst.Integer(str(value))))
            elif how in ("host", "dict"):  # the value node: an unpacked tuple's or a dict's element, in place
                targets[id(node.value)] = (node.value, cst.Integer(str(value)))
            elif how == "param":
                targets[id(node)] = (node, node.with_changes(default=cst.Integer(str(value))))
            elif how == "callers":
                for arg in node.args:
                    targets[id(arg)] = (arg, arg.with_changes(value=cst.Integer(str(value))))
            elif how == "default":
                new_default[name] = value
            else:
                raise ActionError(f"cannot rewrite how the launch sets {name}")
    for launch in launches:
        # A grid that repeats a block as a literal (``cdiv(n, 64)``) changes with it; a ``grid`` name
        # other kernels' launches read too stays, and this launch gets its own rewritten copy.
        sites, _why = grid_literal_sites(launch, kernel, launch_values(launch, kernel), shared_ok=True)
        new_ints = {id(site.node): cst.Integer(str(values[site.block] + site.offset)) for site in sites if site.block in values}
        if new_ints and grid_shared(launch, kernel.name):
            name = launch.call.func.slice[0].slice.value  # type: ignore[union-attr]
            targets[id(name)] = (name, private_grid(launch, new_ints))
        else:
            for site in sites:
                if id(site.node) in new_ints:
                    targets[id(site.node)] = (site.node, new_ints[id(site.node)])
    module = replace_all(module, list(targets.values()))
    if new_default:
        kdef, _ = locate(module, kernel.name)
        params = []
        for p in kdef.params.params:
            if p.name.value in new_default:
                if p.default is None:
                    raise ActionError(f"{p.name.value} has no default and no launch sets it")
                p = p.with_changes(default=cst.Integer(str(new_default[p.name.value])))
            params.append(p)
        module = replace_all(module, [(kdef, kdef.with_changes(params=kdef.params.with_changes(params=params)))])
    return module


def set_launch_option(module: cst.Module, kernel_name: str, option: str, value: int) -> cst.Module:
    """Set ``num_warps``/``num_stages`` at every launch (through a host constant when it names one)."""
    _kdef, launches = locate(module, kernel_name)
    if not launches:
        raise ActionError(f"no launch of {kernel_name} in this file")
    # Rewrite one launch at a time, re-locating after each replacement (nodes change identity).
    for index in range(len(launches)):
        _kdef, current = locate(module, kernel_name)
        launch = current[index]
        arg = kwarg(launch.call, option)
        if arg is not None and isinstance(arg.value, cst.Name):
            assign = constant_assignment(launch, arg.value.value)
            if assign is None or not isinstance(assign.value, cst.Integer):
                raise ActionError(f"{option} at the launch is not a constant this action can change")
            module = replace_all(module, [(assign.value, cst.Integer(str(value)))])  # a tuple's element in place
        elif arg is not None and not isinstance(arg.value, cst.Integer):
            raise ActionError(f"{option} at the launch is computed; not changing it")
        else:
            module = replace_all(module, [(launch.call, set_kwarg(launch.call, option, cst.Integer(str(value))))])
    return module


def language_roots(analysis: FileAnalysis) -> frozenset[str]:
    """How this file writes triton.language before a ``.``: ``tl``, ``tl2``, ``language``, ``triton.language``."""
    roots = {name for name, dotted in analysis.names.prefix.items() if dotted == "triton.language"}
    roots |= {f"{name}.language" for name, dotted in analysis.names.prefix.items() if dotted == "triton"}
    return frozenset(roots)


def kernel_language(analysis: FileAnalysis, kernel: Kernel) -> str | None:
    """The spelling of triton.language the kernel itself writes most (``tl``, ``tlang``, ``triton.language``).

    The analysis binds ``tl`` even in a file that never imports it (most kernels use the name), so the
    roots alone do not say what an edit may write."""
    import re

    source = kernel.def_span.text(analysis.text)
    counts = {root: len(re.findall(rf"(?<![\w.]){re.escape(root)}\.", source)) for root in language_roots(analysis)}
    used = [root for root, n in counts.items() if n]
    if not used:
        return None
    return max(used, key=lambda root: (counts[root], "." not in root, -len(root)))


def program_id_axes(kdef: cst.FunctionDef) -> set[int | None]:
    """The axes of every ``tl.program_id`` call in the kernel (None for one not written as a literal)."""
    axes: set[int | None] = set()
    for call in calls_in(kdef):
        if code(call.func) in ("tl.program_id", "triton.language.program_id"):
            arg = call.args[0].value if call.args else None
            axes.add(int(arg.value) if isinstance(arg, cst.Integer) else None)
    return axes


def with_params_appended(kdef: cst.FunctionDef, new: list[cst.Param]) -> cst.FunctionDef:
    """``kdef`` with ``new`` parameters after its last one, in the signature's style: one per line when it is written so
    (the trailing comma, if any, stays last)."""
    params = list(kdef.params.params)
    last = params[-1]
    one_per_line = len(params) > 1 and isinstance(last.comma, cst.Comma) and isinstance(
        last.comma.whitespace_after, cst.ParenthesizedWhitespace) and isinstance(params[-2].comma, cst.Comma) \
        and isinstance(params[-2].comma.whitespace_after, cst.ParenthesizedWhitespace)
    if not one_per_line:
        joiner = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        added = [param.with_changes(comma=joiner) for param in new]
        added[-1] = added[-1].with_changes(comma=last.comma)
        return kdef.with_changes(params=kdef.params.with_changes(params=params[:-1] + [last.with_changes(comma=joiner)] + added))

    def lined(comma: cst.Comma, indent: cst.SimpleWhitespace, keep_comment: bool) -> cst.Comma:
        """``comma`` ending its line (its comment kept only where it was written), the next line indented by ``indent``."""
        space = comma.whitespace_after
        if not keep_comment:
            space = space.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
        return comma.with_changes(whitespace_after=space.with_changes(last_line=indent))

    param_indent = params[-2].comma.whitespace_after.last_line
    joiner = lined(params[-2].comma, param_indent, keep_comment=False)  # a comment belongs to the line it is on
    added = [param.with_changes(comma=joiner) for param in new]
    added[-1] = added[-1].with_changes(comma=lined(last.comma, last.comma.whitespace_after.last_line, keep_comment=False))
    last = last.with_changes(comma=lined(last.comma, param_indent, keep_comment=True))
    return kdef.with_changes(params=kdef.params.with_changes(params=params[:-1] + [last] + added))


class ExplainsByPlan:
    """For an action whose ``_plan(module, analysis, kernel)`` raises ActionError saying why it does not apply."""

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        try:
            self._plan(parse(analysis.text), analysis, kernel)  # type: ignore[attr-defined]
        except ActionError as exc:
            return str(exc)
        return None


def kernel_line(kernel: Kernel) -> int:
    return kernel.def_span.start.line


def fmt_params(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


# ---- autotune configs ------------------------------------------------------------------------------
def autotune_configs(kdef: cst.FunctionDef, module: cst.Module | None = None) -> tuple[cst.List, list[cst.Call]] | None:
    """The literal ``configs=[triton.Config(...), ...]`` list of the kernel's autotune decorator, or (given
    ``module``) of the ``triton.autotune(...)`` call around its jit call (``k = triton.autotune(...)(triton.jit(f))``)."""
    calls = [d.decorator for d in kdef.decorators]
    if module is not None and not calls:
        calls = _wrapping_autotunes(module, kdef.name.value)
    for call in calls:
        if isinstance(call, cst.Call) and code(call.func).endswith("autotune"):
            arg = kwarg(call, "configs") or next((a for a in call.args if a.keyword is None), None)
            if arg is not None and isinstance(arg.value, cst.List):
                configs = [e.value for e in arg.value.elements]
                if configs and all(isinstance(v, cst.Call) and code(v.func).endswith("Config") for v in configs):
                    return arg.value, configs  # type: ignore[return-value]
    return None


def autotune_configs_arg(kdef: cst.FunctionDef, module: cst.Module | None = None) -> cst.Arg | None:
    """The ``configs`` argument of the kernel's autotune decorator (or wrapping call), whatever its expression."""
    calls = [d.decorator for d in kdef.decorators]
    if module is not None and not calls:
        calls = _wrapping_autotunes(module, kdef.name.value)
    for call in calls:
        if isinstance(call, cst.Call) and code(call.func).endswith("autotune"):
            return kwarg(call, "configs") or next((a for a in call.args if a.keyword is None), None)
    return None


def extended_configs(configs: cst.BaseExpression, config: cst.BaseExpression, sequence: str) -> cst.BaseExpression:
    """``configs + [config]`` (``+ (config,)`` for a tuple): one config more, the expression that builds the
    others untouched; a trailing literal of configs (``get_configs() + [...]``) takes it as its last element."""
    if isinstance(configs, cst.BinaryOperation) and isinstance(configs.operator, cst.Add) and \
            isinstance(configs.right, cst.List) and sequence == "list" and configs.right.elements and \
            all(isinstance(e.value, cst.Call) and code(e.value.func).endswith("Config") for e in configs.right.elements):
        return configs.with_changes(right=append_element(configs.right, config))
    tail = cst.List([cst.Element(config)]) if sequence == "list" else \
        cst.Tuple([cst.Element(config, comma=cst.Comma())])
    binds_tighter = isinstance(configs, cst.Name | cst.List | cst.ListComp | cst.Call | cst.Subscript | cst.Tuple) or \
        isinstance(configs, cst.BinaryOperation) and isinstance(configs.operator, cst.Add)
    if not binds_tighter and not configs.lpar:  # ``a if x else b`` must not become ``a if x else b + [c]``
        configs = configs.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.BinaryOperation(configs, cst.Add(), tail)


def _wrapping_autotunes(module: cst.Module, name: str) -> list[cst.Call]:
    """The ``triton.autotune(...)`` call of the statement that jits ``name`` (``k = triton.autotune(...)(triton.jit(name))``)
    or tunes it again under its own name (``name = triton.autotune(...)(name)``), as the analysis reads them."""
    found: list[cst.Call] = []

    class Find(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
                return
            tunes, jitted, value = [], False, node.value
            while isinstance(value, cst.Call) and len(positional := [a for a in value.args if a.keyword is None]) == 1:
                wrapper = code(value.func.func if isinstance(value.func, cst.Call) else value.func)
                tunes += [value.func] if isinstance(value.func, cst.Call) and wrapper.endswith("autotune") else []
                jitted = jitted or wrapper.endswith("jit")
                value = positional[0].value
            if isinstance(value, cst.Name) and value.value == name and (jitted or node.targets[0].target.value == name):
                found.extend(tunes)

    module.visit(Find())
    return found if len(found) == 1 else []


def append_element(lst: cst.List, value: cst.BaseExpression) -> cst.List:
    """``lst`` with ``value`` appended, laid out like the elements before it."""
    elements = list(lst.elements)
    last = elements[-1]
    between = elements[-2].comma if len(elements) > 1 and isinstance(elements[-2].comma, cst.Comma) else \
        cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    elements[-1] = last.with_changes(comma=between)
    elements.append(cst.Element(value=value, comma=last.comma))
    return lst.with_changes(elements=elements)


def autotuned_blocks_tunable(analysis: FileAnalysis, kernel: Kernel, names: list[str]) -> str | None:
    """Why new block sizes in autotune configs could change results (None when they cannot)."""
    if not all_accesses_masked(kernel, analysis.text):
        return "a block-indexed load or store has no mask"
    module = parse(analysis.text)
    _kdef, launches = locate(module, kernel.name)
    if not launches:
        return "no launch of the kernel in this file"
    for name in names:
        for launch in launches:
            if name not in grid_source_names(launch) and not loop_tiled(kernel, name):
                return f"neither the grid nor a loop is derived from {name}"
    return None


# ---- block sizes the host computes: ``min(next_power_of_2(n), CAP)``, ``min(K, 32)`` ----------------
@dataclass
class ComputedBlock:
    """How one launch computes a block size at run time, and the cap literal tiling may change."""

    shown: str  # the expression, for messages
    cap_value: int | None  # CAP of ``min(..., CAP)``; None when there is no cap (``next_power_of_2(n)``, ``max``)
    pow2: bool  # the capped operand is ``next_power_of_2(...)``; else a plain size such as ``K``
    host_var: str | None  # the host name the launch passes (None for an expression at the launch)
    cap_node: cst.BaseExpression | None = None  # the Integer/expression or constant name in ``min``
    operand: cst.BaseExpression | None = None  # the other argument of ``min``
    constant: cst.Assign | None = None  # the constant's assignment when the cap is a name only this ``min`` reads
    why_not: str = ""  # why the cap cannot be changed (empty when it can)


def _is_next_pow2(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and code(node.func).split(".")[-1] in ("next_power_of_2", "_next_power_of_2") \
        and len(node.args) == 1


def int_value(node: cst.CSTNode) -> int | None:
    """The value of an integer literal or literal arithmetic (``65536 // 2``, ``1 << 12``); None otherwise."""
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.BinaryOperation):
        left, right = int_value(node.left), int_value(node.right)
        if left is None or right is None:
            return None
        ops = {cst.Add: lambda: left + right, cst.Subtract: lambda: left - right, cst.Multiply: lambda: left * right,
               cst.FloorDivide: lambda: left // right if right else None, cst.LeftShift: lambda: left << right}
        fn = ops.get(type(node.operator))
        return fn() if fn is not None and (not isinstance(node.operator, cst.LeftShift) or 0 <= right < 32) else None
    return None


def assigned_value(host: cst.FunctionDef | cst.Module | None, name: str) -> cst.BaseExpression | None:
    """The value ``name`` is bound to by the single assignment of ``host``: ``name = v`` or one element of
    ``a, name = x, v``; None when it is bound more than once or another way."""
    if host is None:
        return None
    assign = any_assignment(host, name)
    if assign is not None:
        return assign.value
    finder = _Assignments(name, host)
    host.visit(finder)
    if finder.found:
        return None
    tuples: list[cst.BaseExpression | None] = []
    other_bindings = []

    class V(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is host

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_Assign(self, node: cst.Assign) -> None:
            for t in node.targets:
                if not isinstance(t.target, cst.Tuple) or name not in names_in(t.target):
                    continue
                targets = [e.value for e in t.target.elements]
                values = node.value.elements if isinstance(node.value, cst.Tuple) else []
                if len(node.targets) == 1 and len(values) == len(targets) and not any(
                        isinstance(e, cst.StarredElement) for e in [*t.target.elements, *values]):
                    tuples.extend(v.value for tgt, v in zip(targets, values)
                                  if isinstance(tgt, cst.Name) and tgt.value == name)
                else:
                    tuples.append(None)  # unpacked from a call or nested: unknown

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if name in names_in(node.target):
                other_bindings.append(node)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            if name in names_in(node.target):
                other_bindings.append(node)

        def visit_For(self, node: cst.For) -> None:
            if name in names_in(node.target):
                other_bindings.append(node)

    host.visit(V())
    return tuples[0] if len(tuples) == 1 and not other_bindings else None


def _binding_source(host: cst.FunctionDef, name: str) -> cst.Assign | None:
    """The first assignment in ``host`` whose targets bind ``name`` (for messages)."""
    found: list[cst.Assign] = []

    class V(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            if any(name in names_in(t.target) for t in node.targets):
                found.append(node)

    host.visit(V())
    return found[0] if found else None


def _names_through(host: cst.FunctionDef | None, start: set[str], depth: int = 3) -> set[str]:
    """``start`` and the names their single assignments in ``host`` read (tuple assignments included)."""
    names, frontier = set(start), set(start)
    for _ in range(depth):
        following: set[str] = set()
        for name in frontier:
            value = assigned_value(host, name) if host is not None else None
            if value is not None:
                following |= names_in(value) - names
        if not following:
            break
        names |= following
        frontier = following
    return names


def computed_block(launch: LaunchNode, kernel: Kernel, param: str) -> ComputedBlock | None:
    """The launch's run-time block expression for ``param`` (None when it binds it another way)."""
    how, node = binding_of(launch, kernel, param)
    if how != "other" or node is None:
        return None
    value = node.value  # type: ignore[union-attr]
    host_var = None
    if isinstance(value, cst.Name):
        host_var = value.value
        if launch.host is None or value.value in _param_names(launch.host):
            return None
        value = assigned_value(launch.host, host_var)
        if value is None:  # ``BLOCK_SIZE, num_warps = calculate_settings(n)``: computed where tiling cannot see
            source = _binding_source(launch.host, host_var)
            if source is None:
                return None
            shown = code(source)
            return ComputedBlock(shown if len(shown) <= 60 else shown[:57] + "...", None, False, host_var,
                                 why_not="set by code tiling does not read")
    shown = code(value)
    found = ComputedBlock(shown if len(shown) <= 60 else shown[:57] + "...", None, False, host_var)
    if _is_next_pow2(value):
        found.pow2 = True
        found.why_not = "no cap to change"
        return found
    if not (isinstance(value, cst.Call) and code(value.func) in ("min", "builtins.min") and len(value.args) == 2) \
            or any(a.keyword or a.star for a in value.args):
        found.why_not = "not a `min(next_power_of_2(n), CAP)` or `min(n, CAP)` cap"
        return found
    first, second = (a.value for a in value.args)
    if _is_next_pow2(first) or _is_next_pow2(second):
        operand, cap = (first, second) if _is_next_pow2(first) else (second, first)
    else:  # ``min(K, 32)`` or ``min(MAX_BLOCK, K)``: the cap is whichever is a constant
        operand, cap = (first, second) if _cap_value(launch, second)[0] is not None else (second, first)
    cap_value, constant = _cap_value(launch, cap)
    if cap_value is None or not is_pow2(cap_value):
        bound = launch_assignment(launch, cap.value)[0] if isinstance(cap, cst.Name) else None
        found.why_not = (f"its cap `{code(cap)}` is computed at run time (`{code(bound.value)}`)"
                         if bound is not None and cap_value is None else
                         f"its cap `{code(cap)}` is not a power-of-two integer constant")
        return found
    found.cap_value, found.cap_node, found.operand, found.constant = cap_value, cap, operand, constant
    found.pow2 = _is_next_pow2(operand)
    if not found.pow2 and not isinstance(operand, cst.Name | cst.Attribute | cst.Subscript):
        found.why_not = f"`{code(operand)}` is neither next_power_of_2(...) nor a plain size"
    return found


def _cap_value(launch: LaunchNode, cap: cst.BaseExpression) -> tuple[int | None, cst.Assign | None]:
    """(the cap's value, the module/host constant assignment to edit when only this cap reads it)."""
    literal = int_value(cap)
    if literal is not None:
        return literal, None
    if not isinstance(cap, cst.Name):
        return None, None
    assign, at_module = launch_assignment(launch, cap.value)
    if assign is None or int_value(assign.value) is None:
        return None, None
    scope = launch.module if at_module else launch.host
    if scope is None:
        return int_value(assign.value), None
    reads = count_name(scope, cap.value) - (sum(count_name(fn, cap.value) for fn in _functions_binding(scope, cap.value))
                                            if at_module else 0)
    return int_value(assign.value), (assign if reads == 2 else None)  # the assignment and this cap


def computed_block_grid_derived(launch: LaunchNode, block: ComputedBlock, param: str) -> bool:
    """The launch's grid counts blocks of this size (``cdiv(n, BLOCK)``, through tuple assignments too)."""
    grid_names = _names_through(launch.host, names_in(grid_expression(launch)))
    return param in grid_names or (block.host_var is not None and block.host_var in grid_names)


def cap_rewrites(block: ComputedBlock, new_cap: int) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    """(node, replacement) pairs setting the cap to ``new_cap``: the constant only this cap reads, else the
    literal in ``min``; a plain size raised past the old cap is rounded up to a power of two."""
    pairs: list[tuple[cst.CSTNode, cst.CSTNode]] = []
    if block.constant is not None:
        pairs.append((block.constant, block.constant.with_changes(value=cst.Integer(str(new_cap)))))
    else:
        pairs.append((block.cap_node, cst.Integer(str(new_cap))))  # type: ignore[arg-type]
    if not block.pow2 and new_cap > (block.cap_value or 0):
        pairs.append((block.operand, expr(f"triton.next_power_of_2({code(block.operand)})")))  # type: ignore[arg-type]
    return pairs
