"""Whether an unmasked access in a loop only touches whole tiles below a size: the mask-free main loop.

Tuned kernels split a row into whole tiles read without a mask and one masked last tile (FlagGems' norms:
``for step in range(0, tl.cdiv(N, TILE_N) - 1): offs = step * TILE_N + tl.arange(0, TILE_N)``; the
mask_free_k action's ``range(0, K // BLOCK_K)``). Such an access stays below ``N`` whatever ``N`` is, so
MTMC103 must not call it unmasked past the end.

The loop's range and the access's offsets are read as integer arithmetic over the kernel's parameters,
then evaluated for sizes from 1 up and power-of-two blocks, at the first, middle and last iteration and
at both ends of the ``tl.arange``. A sampled check, not a proof: it accepts the spellings whose bound holds
for every size tried, and gives up (the warning stays) on anything it cannot evaluate. Nothing is run:
the expressions are walked node by node.
"""

from __future__ import annotations

import ast
import copy
import functools
import itertools

from .kernel_facts import HINT_OPS, MemoryOp

# Sizes tried for the bound: every small size (the last tile partial or not at each block), and around
# a few powers of two.
SIZES = (*range(1, 34), 63, 64, 65, 127, 128, 129, 1000, 1023, 1024, 1025, 4097)
BLOCKS = (1, 2, 4, 16, 64)  # constexpr blocks (powers of two)
OTHERS = (1, 3, 64)  # other scalar parameters the expressions name
_RANGES = frozenset({"range", "tl.range", "tl.static_range"})
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}


class _Unknown(Exception):
    """An expression this module does not evaluate."""


def one_line_helpers(functions: list[ast.FunctionDef]) -> dict[str, ast.FunctionDef]:
    """The ``@triton.jit`` helpers among ``functions`` that are one ``return <expression>`` of their parameters
    (FlagGems' ``prev_multiple_of(a, b): return tl.cdiv(a, b) * b - b``): calls to them can be read in place."""
    out = {}
    for fn in functions:
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        args = fn.args
        if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None or args.vararg or \
                args.kwarg or args.kwonlyargs or args.defaults or args.posonlyargs:
            continue
        params = {a.arg for a in args.args}
        names = {n.id for n in ast.walk(body[0].value) if isinstance(n, ast.Name)}
        if names - params <= {"tl", "triton"}:
            out[fn.name] = fn
    return out


def in_whole_tiles(facts, op: MemoryOp, params: dict[str, str], sizes: list[str],
                   helpers: dict[str, ast.FunctionDef] | None = None) -> bool:
    """Whether ``op``'s offsets stay in ``[0, S)`` for one of ``sizes`` that bounds its loop (``params``: name ->
    "scalar" or "constexpr"; ``helpers``: ``one_line_helpers`` of the file, read in place where called)."""
    loop = op.loop
    if not isinstance(loop, ast.For) or not isinstance(loop.target, ast.Name) or op.pointer is None:
        return False
    try:
        bounds = _range_args(facts, loop.iter)
        local = _loop_values(loop, op.node.lineno)
        var = loop.target.id
        if var in local:
            return False  # the loop moves its own counter
        inline = _Inliner(facts, local, var, params, helpers or {})
        terms = _terms(facts, op.pointer, local)
        if not any(_in_loop(t, var, local) for t in terms):
            return False
        # Every term but the program's row pick is read: a block the loop does not move (a program-id tile)
        # fails to evaluate or to stay in range, a bare tl.arange stays in range only where the loop runs.
        block = [inline(t) for t in terms if not _row_pick(facts, t, var, local)]
        offsets = functools.reduce(lambda left, right: ast.BinOp(left, ast.Add(), right), block)
        bounds = [inline(b) for b in bounds]
    except _Unknown:
        return False
    free = _names(offsets, *bounds) - {var}
    if not free <= set(params):
        return False
    in_range = _names(*bounds)
    return any(_holds(offsets, bounds, var, size, free, params) for size in sizes if size in in_range)


def _names(*nodes: ast.AST) -> set[str]:
    """The variables ``nodes`` read (not the ``__cdiv``/``__arange`` the inliner writes)."""
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name) and not n.id.startswith("__")}


def _holds(offsets: ast.AST, bounds: list[ast.AST], var: str, size: str, free: set[str],
           params: dict[str, str]) -> bool:
    others = sorted(free - {size})
    if len(others) > 3:
        return False
    choices = [BLOCKS if params[n] == "constexpr" else OTHERS for n in others]
    try:
        for n in SIZES:
            for values in itertools.product(*choices):
                env = {size: n, **dict(zip(others, values))}
                steps = range(*(_value(b, env) for b in bounds))  # the loop's own range, at these sizes
                for i in {0, len(steps) // 2, len(steps) - 1} if steps else ():
                    for end in (0, 1):
                        offset = _value(offsets, {**env, var: steps[i]}, end)
                        if not 0 <= offset < n:
                            return False
    except (_Unknown, ZeroDivisionError, ValueError):  # ValueError: a zero step
        return False
    return True


def _value(node: ast.AST, env: dict[str, int], end: int = 0) -> int:
    """``node`` as an integer; ``tl.arange(a, b)`` is ``a`` (end 0) or ``b - 1`` (end 1)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise _Unknown(node.id)
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left, env, end), _value(node.right, env, end)
        if isinstance(node.op, ast.FloorDiv | ast.Mod) and (left < 0 or right <= 0):
            raise _Unknown("division of a negative value")  # Triton truncates, Python floors
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, env, end)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 2:
        a, b = (_value(x, env, end) for x in node.args)
        if node.func.id == "__cdiv" and b > 0:
            return -(-a // b)
        if node.func.id == "__arange":
            return a if end == 0 else b - 1
    raise _Unknown(ast.dump(node)[:40])


class _Inliner:
    """Replaces names by what they hold at the access: the loop body's values before it, the kernel's single
    assignments; parameters and the loop counter stay. ``tl.cdiv``/``triton.cdiv`` and ``tl.arange`` become
    ``__cdiv``/``__arange``; hints and casts are dropped."""

    def __init__(self, facts, local: dict[str, ast.AST | None], var: str, params: dict[str, str],
                 helpers: dict[str, ast.FunctionDef]):
        self.facts, self.local, self.var, self.params, self.helpers = facts, local, var, params, helpers

    def __call__(self, node: ast.AST, depth: int = 0) -> ast.AST:
        if depth > 12:
            raise _Unknown("too deep")
        if isinstance(node, ast.Name):
            if node.id == self.var or (node.id in self.params and node.id not in self.local):
                return node
            if node.id in self.local:
                value = self.local[node.id]
            else:
                values = self.facts.assignments.get(node.id, [])
                value = values[0] if len(values) == 1 else None
            if value is None:
                raise _Unknown(node.id)
            return self(value, depth + 1)
        if isinstance(node, ast.Constant):
            return node
        if isinstance(node, ast.BinOp):
            return ast.BinOp(self(node.left, depth + 1), node.op, self(node.right, depth + 1))
        if isinstance(node, ast.UnaryOp):
            return ast.UnaryOp(node.op, self(node.operand, depth + 1))
        if isinstance(node, ast.Subscript):  # offs[None, :]
            return self(node.value, depth + 1)
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "to":
                return self(node.func.value, depth + 1)
            op = self.facts.tl_op(node.func)
            dotted = ast.unparse(node.func)
            if op in HINT_OPS and node.args:
                return self(node.args[0], depth + 1)
            if (op == "cdiv" or dotted == "triton.cdiv") and len(node.args) == 2:
                return ast.Call(ast.Name("__cdiv"), [self(a, depth + 1) for a in node.args], [])
            if op == "arange" and len(node.args) == 2:
                return ast.Call(ast.Name("__arange"), [self(a, depth + 1) for a in node.args], [])
            helper = self.helpers.get(node.func.id) if isinstance(node.func, ast.Name) else None
            if helper is not None and len(node.args) == len(helper.args.args) and not node.keywords:
                # The helper's expression with its parameters replaced by the call's arguments (kernel expressions,
                # read here like any other): its other names are only tl / triton.
                given = {a.arg: v for a, v in zip(helper.args.args, node.args)}
                return self(_Substitute(given).visit(copy.deepcopy(helper.body[-1].value)), depth + 1)
        raise _Unknown(ast.dump(node)[:40])


class _Substitute(ast.NodeTransformer):
    """Parameter names -> the call's arguments."""

    def __init__(self, given: dict[str, ast.AST]):
        self.given = given

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return self.given.get(node.id, node)


def _range_args(facts, node: ast.AST) -> list[ast.AST]:
    if not isinstance(node, ast.Call) or not 1 <= len(node.args) <= 3:
        raise _Unknown("not a range")
    name = ast.unparse(node.func)
    if name not in _RANGES and facts.tl_op(node.func) not in ("range", "static_range"):
        raise _Unknown("not a range")
    return list(node.args)


def _loop_values(loop: ast.For, line: int) -> dict[str, ast.AST | None]:
    """Names the loop body assigns -> their value at ``line`` (None: unknown there, as a value carried from the
    previous iteration or set under a branch)."""
    values: dict[str, ast.AST | None] = {}
    for stmt in loop.body:
        for node in ast.walk(stmt):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign | ast.For | ast.NamedExpr) else []
            for target in targets:
                values.update({n.id: None for n in ast.walk(target) if isinstance(n, ast.Name)})
    for stmt in loop.body:
        if (stmt.end_lineno or stmt.lineno) >= line:
            break
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            values[stmt.targets[0].id] = stmt.value
        else:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    values[node.id] = None
    return values


def _terms(facts, node: ast.AST, local: dict, depth: int = 0) -> list[ast.AST]:
    """The terms of a sum (``a + b + c``), through the names that hold one (``ptrs = base + offs``)."""
    if depth > 12:
        raise _Unknown("too deep")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _terms(facts, node.left, local, depth + 1) + _terms(facts, node.right, local, depth + 1)
    if isinstance(node, ast.Name):
        values = [local[node.id]] if node.id in local else facts.assignments.get(node.id, [])
        if len(values) == 1 and isinstance(values[0], ast.BinOp) and isinstance(values[0].op, ast.Add):
            return _terms(facts, values[0], local, depth + 1)
    return [node]


def _in_loop(term: ast.AST, var: str, local: dict) -> bool:
    return any(isinstance(n, ast.Name) and (n.id == var or n.id in local) for n in ast.walk(term))


def _row_pick(facts, term: ast.AST, var: str, local: dict) -> bool:
    """A term the loop does not move and that is one value per program (a base pointer, ``pid * stride``)."""
    return not _in_loop(term, var, local) and facts.shape_of(term) == ()
