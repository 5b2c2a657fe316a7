"""Mask-free K loop: rows and columns wrap instead of being masked, and the K mask goes when K is a multiple of BLOCK_K.

The way Triton's matmul tutorial writes its loop: the A rows and B columns a program loads are taken
modulo M and N (``offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M``), so the loop's loads need no
row or column mask; the rows and columns past the edge compute values the final store never writes (it
keeps its own mask on the unwrapped offsets). A new constexpr ``EVEN_K``, computed where the kernel is
launched (``EVEN_K=K % BLOCK_K == 0``; under ``@triton.autotune`` a ``@triton.heuristics`` entry below it),
picks loads without any mask; otherwise only the K part of the mask stays. H200, fp16 8192-size matmuls
(benchmarks/results/h200/suite_tiles/suite_tiles.md): with grouped program order both together are
1.04-1.17x over the masked loop at the same tile; either alone about 1.0x, and grouped order alone 0.98-1.05x, so
the ``GROUP_M=8`` variant (offered where ``reordering`` applies) does grouped order first, in the same step: a loop
that keeps only faster steps would reject each half on its own.

Offered on one top-level ``range`` / ``tl.range`` loop over ``range(0, K, BLOCK_K)`` or
``range(0, tl.cdiv(K, BLOCK_K))`` that only loads A and B (pointer definitions and ``+=`` steps allowed) and
accumulates ``tl.dot(a, b)``; each load's mask is a K part (``(k + offs_k)[None, :] < K``,
``offs_k[None, :] < K - k * BLOCK_K``, ...) and at most one row (A: ``offs_m[:, None] < M``) or column
(B: ``offs_n[None, :] < N``) part; after the loop the accumulator only goes through elementwise operations
into stores masked on the same rows and columns. Anything else is refused with the reason.

Example: kernel=mm_kernel target=h100 params={}

```python before
@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def mm(a, b, c, M, N, K):
    mm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
```

```python after
@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    ram = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rbn = (tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a_ptrs = a_ptr + ram[:, None] * K + (k + rk)[None, :]
        b_ptrs = b_ptr + (k + rk)[:, None] * N + rbn[None, :]
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=(k + rk)[None, :] < K, other=0.0)
            b = tl.load(b_ptrs, mask=(k + rk)[:, None] < K, other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def mm(a, b, c, M, N, K):
    mm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, EVEN_K=K % 32 == 0)
```
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import libcst as cst

from ..analysis import FileAnalysis, Kernel, analyze
from ..analysis.model import Value
from ..edits import changed_line_count
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate, Edit
from .reordering import ACTION as REORDERING
from .reordering import GROUP_PARAM

EVEN = "EVEN_K"
GROUP = 8  # the group size measured with it (suite_tiles.md)
# Calls the accumulator may pass through after the loop: elementwise, so a wrapped row or column (whose
# values are another row's) never reaches a kept element. Reductions, reshapes and helpers are refused.
ELEMENTWISE = frozenset({
    "to", "cast", "exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "abs", "erf", "sigmoid", "maximum",
    "minimum", "where", "fma", "cos", "sin", "tanh", "floor", "ceil", "clamp", "fdiv", "div_rn", "softplus",
})
_AXES = ("rows", "cols")  # what mask_free_k calls the dimensions c.broadcast_axis numbers 0 and 1


@dataclass
class _Edge:
    """The row (A) or column (B) part of a load's mask: ``offsets[:, None] < size``."""

    offsets: str
    size: str
    statement: cst.SimpleStatementLine  # the offsets' assignment, a top-level statement before the loop
    value: cst.BaseExpression
    wrapped: str = ""  # the name the loop's loads read (== offsets when the offsets are wrapped in place)


@dataclass
class _Operand:
    """One of the two loads that feed ``tl.dot``."""

    statement: cst.SimpleStatementLine
    target: str
    load: cst.Call
    pointer: cst.BaseExpression
    k_part: cst.BaseExpression
    kept_args: list[cst.Arg]  # ``other=`` and the load's other keywords, for the masked branch
    edge: _Edge | None
    pointer_def: cst.Assign | None = None  # the pointer name's single assignment (the loop's or before it)
    hoisted: str = ""  # a new ``<target>_ptrs`` name for an inline pointer expression


@dataclass
class _Plan:
    kdef: cst.FunctionDef
    loop: cst.For
    operands: list[_Operand]
    size_k: str
    block_k: str
    by_heuristic: bool  # EVEN_K comes from a @triton.heuristics entry (autotuned or heuristic blocks)
    language: str  # how the file spells triton.language (``tl``)
    launch_values: list[tuple[str, bool]] = field(default_factory=list)  # per launch: EVEN_K's expression, literal block


def _broadcast(node: cst.BaseExpression) -> tuple[cst.BaseExpression, str | None]:
    """``x[:, None]`` -> (x, "rows"), ``x[None, :]`` -> (x, "cols"), anything else -> (node, None)."""
    inner, axis = c.broadcast_axis(node)
    return inner, None if axis is None else _AXES[axis]


def _assignments(kdef: cst.FunctionDef) -> dict[str, list[set[str]]]:
    """Name -> the names each of its bindings reads (assignments, augmented ones, loop targets)."""
    found: dict[str, list[set[str]]] = {}

    class V(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            for t in node.targets:
                for name in c.names_in(t.target):
                    found.setdefault(name, []).append(c.names_in(node.value) | _called_ops(node.value))

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            for name in c.names_in(node.target):
                found.setdefault(name, []).append(c.names_in(node.value) | _called_ops(node.value) | {name})

        def visit_For(self, node: cst.For) -> None:
            for name in c.names_in(node.target):
                found.setdefault(name, []).append(c.names_in(node.iter) | _called_ops(node.iter))

    kdef.body.visit(V())
    return found


def _called_ops(node: cst.CSTNode) -> set[str]:
    """``program_id(0)`` for each program id the expression reads, as a name the closure can follow."""
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            if isinstance(n.func, cst.Attribute) and n.func.attr.value == "program_id":
                found.add(f"program_id({c.flat(n.args[0].value) if n.args else ''})")

    node.visit(V())
    return found


def _bindings(kdef: cst.FunctionDef, name: str) -> tuple[list[cst.Assign], list[cst.CSTNode]]:
    """(the plain ``name = ...`` assignments of the kernel, every other binding of ``name``)."""
    assigns: list[cst.Assign] = []
    others: list[cst.CSTNode] = []

    class V(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            for t in node.targets:
                if isinstance(t.target, cst.Name) and t.target.value == name and len(node.targets) == 1:
                    assigns.append(node)
                elif name in c.names_in(t.target):
                    others.append(node)

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if name in c.names_in(node.target):
                others.append(node)

        def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
            if name in c.names_in(node.target):
                others.append(node)

        def visit_For(self, node: cst.For) -> None:
            if name in c.names_in(node.target):
                others.append(node)

    kdef.body.visit(V())
    return assigns, others


def _closure(start: set[str], reads: dict[str, list[set[str]]], barrier: set[str] = frozenset()) -> set[str]:
    """``start`` and every name their bindings read, transitively, not looking through ``barrier``."""
    seen, frontier = set(start), [n for n in start if n not in barrier]
    while frontier:
        name = frontier.pop()
        for read in reads.get(name, []):
            for other in read - seen:
                seen.add(other)
                if other not in barrier:
                    frontier.append(other)
    return seen


class MaskFreeK:
    name = "mask_free_k"
    # Pipelining: the change is to the K loop's steady state, the part software pipelining overlaps: its
    # loads become unpredicated full tiles. The wrap and the EVEN_K branch add no stages and move no work
    # out of the loop (Hoist), nor change the order of programs (Reordering).
    kind = "Pipelining"
    changes_numerics = False
    max_changed_lines = 40  # wrapped offsets, the loads' if/else, signature, launch (and grouped order's 10 lines)

    def _plan(self, module: cst.Module, analysis: FileAnalysis, kernel: Kernel) -> _Plan:
        roots = c.language_roots(analysis)
        if not roots:
            raise ActionError("the file does not import triton.language")
        if kernel.param(EVEN) is not None or EVEN in kernel.heuristics:
            raise ActionError(f"{kernel.name} already has {EVEN}")
        if not kernel.calls_of("dot"):
            raise ActionError("no tl.dot in the kernel")
        kdef, launches = c.locate(module, kernel.name)
        if EVEN in c.names_in(kdef):
            raise ActionError(f"{kernel.name} already uses the name {EVEN}")
        body = list(kdef.body.body)
        loops = [s for s in body if isinstance(s, cst.For) and c.contains(s, cst.Call, lambda n: c.is_call(n, "dot", roots))]
        if len(loops) != 1:
            raise ActionError("the kernel has no single top-level loop that feeds tl.dot" if not loops
                              else "more than one top-level loop feeds tl.dot")
        loop = loops[0]
        if c.contains(loop.body, cst.For) or c.contains(loop.body, cst.While) or loop.orelse is not None:
            raise ActionError("the K loop holds another loop (or an else)")
        size_k, block_k, kterm, var = self._loop_shape(loop, kernel, roots)
        bound = c.bound_names(list(body))
        if {size_k, block_k} & bound:
            raise ActionError(f"{size_k} or {block_k} is reassigned in the kernel")
        if var in c.bound_names(list(loop.body.body)):
            raise ActionError(f"the loop variable {var} is reassigned in the loop")
        reads = _assignments(kdef)
        operands, acc = self._loop_body(loop, kdef, body, reads, roots, size_k, block_k, kterm, var)
        self._check_after_loop(body[body.index(loop) + 1:], acc, operands, kdef, roots)
        self._name_wraps(operands, kdef, loop)
        language = min((r for r in roots if "." not in r), default=min(roots))
        plan = _Plan(kdef, loop, operands, size_k, block_k, False, language)
        plan.by_heuristic = kernel.is_autotuned or block_k in kernel.heuristics or size_k in kernel.heuristics
        if plan.by_heuristic:
            self._check_heuristic(kernel, kdef, launches, block_k)
        else:
            plan.launch_values = [self._launch_value(launch, kernel, size_k, block_k) for launch in launches]
            if not launches:
                raise ActionError(f"no launch of {kernel.name} in this file to compute {EVEN} at")
        return plan

    @staticmethod
    def _loop_shape(loop: cst.For, kernel: Kernel, roots: frozenset[str]) -> tuple[str, str, str, str]:
        """(K, BLOCK_K, the loop's offset term, loop variable) of ``range(0, K, BLOCK_K)`` or ``range(0, cdiv(K, BLOCK_K))``."""
        it = loop.iter
        why = "the K loop is not range(0, K, BLOCK_K) or range(0, tl.cdiv(K, BLOCK_K))"
        if not isinstance(loop.target, cst.Name) or not isinstance(it, cst.Call):
            raise ActionError(why)
        spelled = c.code(it.func)
        if not (spelled == "range" or (spelled.endswith(".range") and spelled.rsplit(".", 1)[0] in roots)):
            raise ActionError(why)
        args = [a.value for a in it.args if a.keyword is None]
        if any(a.star for a in it.args) or any(a.keyword and a.keyword.value in ("step", "start", "end", "arg1", "arg2", "arg3")
                                               for a in it.args):
            raise ActionError(why)
        var = loop.target.value

        def constexpr(node: cst.CSTNode) -> str | None:
            p = kernel.param(node.value) if isinstance(node, cst.Name) else None
            return p.name if p is not None and p.kind == "constexpr" else None

        def scalar(node: cst.CSTNode) -> str | None:
            p = kernel.param(node.value) if isinstance(node, cst.Name) else None
            return p.name if p is not None and p.kind == "scalar" else None

        zero = len(args) >= 2 and isinstance(args[0], cst.Integer) and args[0].value == "0"
        if len(args) == 3 and zero:
            size, block = scalar(args[1]), constexpr(args[2])
            if size is None or block is None:
                raise ActionError(f"{why}: `{c.code(it)}` does not step a size argument by a constexpr block")
            return size, block, var, var
        count = args[0] if len(args) == 1 else args[1] if len(args) == 2 and zero else None
        if isinstance(count, cst.Call) and c.code(count.func).split(".")[-1] == "cdiv" and len(count.args) == 2:
            size, block = scalar(count.args[0].value), constexpr(count.args[1].value)
            if size is not None and block is not None:
                return size, block, _product(var, block), var
        raise ActionError(f"{why}: `{c.code(it)}`")

    def _loop_body(self, loop, kdef, body, reads, roots, size_k, block_k, kterm, var) -> tuple[list[_Operand], str]:
        """The two loads of the loop and the accumulator's name; refuses a loop that does anything else."""
        loads: dict[str, tuple[cst.SimpleStatementLine, cst.Call]] = {}
        helpers: dict[str, tuple[int, cst.BaseExpression]] = {}  # names the loop assigns: pointers or K arithmetic
        steps: list[cst.AugAssign] = []
        dots: list[tuple[str, cst.Call, int]] = []  # (accumulator, dot, how often the statement names it)
        assigned: set[str] = set()
        for index, statement in enumerate(loop.body.body):
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
            shown = c.code(statement).strip().splitlines()[0] if statement is not None else ""
            if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
                dot = c.unparen(small.value)
                if isinstance(small.operator, cst.AddAssign) and c.is_call(dot, "dot", roots):
                    dots.append((small.target.value, dot, 1))
                else:
                    steps.append(small)
                continue
            if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)):
                raise ActionError(f"the K loop holds `{shown}`: only the A/B loads, their pointers and the tl.dot are understood")
            target, value = small.targets[0].target.value, c.unparen(small.value)
            if target in assigned:
                raise ActionError(f"the K loop assigns {target} twice")
            assigned.add(target)
            load = value if c.is_call(value, "load", roots) else None
            if load is None and isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
                    and value.func.attr.value == "to" and c.is_call(c.unparen(value.func.value), "load", roots):
                load = c.unparen(value.func.value)
            accumulated = self._accumulation(target, value, roots)
            if load is not None:
                loads[target] = (index, statement, load)
            elif accumulated is not None:
                dots.append((target, accumulated, 2))
            elif c.contains(value, cst.Call, lambda n: not c.is_call(n, "arange", roots) and not c.is_call(n, "cdiv", roots)):
                raise ActionError(f"the K loop holds `{shown}`: only the A/B loads, their pointers and the tl.dot are understood")
            else:
                helpers[target] = (index, value)
        if len(dots) != 1:
            raise ActionError("the K loop does not accumulate exactly one tl.dot (`acc += tl.dot(a, b)`)")
        acc, dot, named = dots[0]
        operands_names = [a.value for a in dot.args if a.keyword is None][:2]
        if len(operands_names) != 2 or not all(isinstance(n, cst.Name) for n in operands_names):
            raise ActionError("tl.dot does not multiply two loaded names (`tl.dot(a, b)`)")
        names = [n.value for n in operands_names]
        if set(loads) != set(names) or len(set(names)) != 2:
            raise ActionError("the K loop's loads are not exactly the two tl.dot operands")
        if c.count_name(loop.body, acc) != named:
            raise ActionError(f"the accumulator {acc} is used in the K loop besides the tl.dot")
        arange_names = {n for n in c.bound_names(list(body)) if self._is_arange(c.any_assignment(kdef, n), block_k, roots)
                        and n not in c.bound_names(list(loop.body.body))}
        operands = []
        for axis, name in zip(("rows", "cols"), names):
            index, statement, load = loads[name]
            before = {n: v for n, (i, v) in helpers.items() if i < index}  # what the load's mask sees this iteration
            operands.append(self._operand(name, statement, load, axis, loop, kdef, body, reads, roots, before, steps,
                                          arange_names, size_k, block_k, kterm, var))
        pointers = {op.pointer.value for op in operands if isinstance(op.pointer, cst.Name)}
        for step in steps:
            if step.target.value not in pointers:
                raise ActionError(f"the K loop updates {step.target.value}, which is not a load's pointer")
            if any(op.edge and op.edge.offsets in c.names_in(step.value) for op in operands):
                raise ActionError(f"the step of {step.target.value} reads the row or column offsets")
        for helper in helpers:
            if helper not in pointers and any(c.count_name(op.pointer, helper) for op in operands):
                raise ActionError(f"the pointer reads {helper}, assigned in the K loop")
        return operands, acc

    @staticmethod
    def _accumulation(target: str, value: cst.BaseExpression, roots: frozenset[str]) -> cst.Call | None:
        """The dot of ``acc = tl.dot(a, b, acc)``, ``acc = tl.dot(a, b, acc=acc)`` or ``acc = acc + tl.dot(a, b)``."""
        if c.is_call(value, "dot", roots):
            extra = [a for a in value.args if a.keyword is None][2:] + [a for a in value.args if a.keyword and a.keyword.value == "acc"]
            if len(extra) == 1 and isinstance(extra[0].value, cst.Name) and extra[0].value.value == target:
                return value
            return None
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
            for mine, other in ((value.left, value.right), (value.right, value.left)):
                if isinstance(mine, cst.Name) and mine.value == target and c.is_call(c.unparen(other), "dot", roots):
                    return c.unparen(other)
        return None

    @staticmethod
    def _is_arange(assign: cst.Assign | None, block_k: str, roots: frozenset[str]) -> bool:
        if assign is None:
            return False
        value = c.unparen(assign.value)
        return c.is_call(value, "arange", roots) and [c.code(a.value) for a in value.args] == ["0", block_k]

    def _operand(self, name, statement, load, axis, loop, kdef, body, reads, roots, helpers, steps, arange_names,
                 size_k, block_k, kterm, var) -> _Operand:
        positional = [a for a in load.args if a.keyword is None]
        keywords = {a.keyword.value: a for a in load.args if a.keyword is not None}
        if len(positional) != 1 or any(a.star for a in load.args):
            raise ActionError(f"the load of {name} passes its mask positionally (or more than the pointer)")
        if "mask" not in keywords:
            raise ActionError(f"the load of {name} has no mask: nothing to take out")
        if "boundary_check" in keywords or "padding_option" in keywords:
            raise ActionError(f"the load of {name} reads a block pointer")
        pointer = positional[0].value
        k_parts, edges, other = [], [], []

        def linear(node: cst.BaseExpression, depth: int = 0) -> Counter | None:
            node = c.unparen(node)
            if depth > 4:
                return None
            if isinstance(node, cst.Subscript):
                inner, how = _broadcast(node)
                return linear(inner, depth) if how else None
            if isinstance(node, cst.Name):
                if node.value in helpers:
                    return linear(helpers[node.value], depth + 1)
                if node.value in arange_names:
                    return Counter({"arange": 1})
                return Counter({node.value: 1})
            if c.is_call(node, "arange", roots):
                return Counter({"arange": 1}) if [c.code(a.value) for a in node.args] == ["0", block_k] else None
            if isinstance(node, cst.BinaryOperation):
                left, right = linear(node.left, depth), linear(node.right, depth)
                if left is None or right is None:
                    return None
                if isinstance(node.operator, cst.Add):
                    return _add(left, right, 1)
                if isinstance(node.operator, cst.Subtract):
                    return _add(left, right, -1)
                if isinstance(node.operator, cst.Multiply) and len(left) == len(right) == 1 \
                        and set(left.values()) == set(right.values()) == {1}:
                    return Counter({_product(next(iter(left)), next(iter(right))): 1})
            return None

        for part in c.conjuncts(keywords["mask"].value):
            if isinstance(part, cst.Comparison) and len(part.comparisons) == 1 \
                    and isinstance(part.comparisons[0].operator, cst.LessThan):
                left, right = part.left, part.comparisons[0].comparator
                lhs, rhs = linear(left), linear(right)
                if lhs is not None and rhs is not None and _add(lhs, rhs, -1) == Counter({"arange": 1, kterm: 1, size_k: -1}):
                    k_parts.append(part)
                    continue
                offsets, how = _broadcast(left)
                if how == axis and isinstance(offsets, cst.Name) and isinstance(right, cst.Name) \
                        and offsets.value not in arange_names and right.value != size_k:
                    edges.append((offsets.value, right.value))
                    continue
            other.append(part)
        where = "row" if axis == "rows" else "column"
        shape = "(rows[:, None] < M) & (k_offsets[None, :] < K)" if axis == "rows" else \
            "(k_offsets[:, None] < K) & (cols[None, :] < N)"
        if other or len(k_parts) != 1 or len(edges) > 1:
            raise ActionError(f"the mask of {name} is not a {where} part and a K part, `{shape}` "
                              f"(the K part relative to the loop's `{var}` and `tl.arange(0, {block_k})`)")
        edge = None
        if edges:
            edge = self._edge(edges[0], kdef, body, loop, name)
        operand = _Operand(statement, name, load, pointer, k_parts[0],
                           [a for k, a in keywords.items() if k != "mask"], edge)
        if isinstance(pointer, cst.Name):
            assigns, others = _bindings(kdef, pointer.value)
            increments = [s for s in steps if s.target.value == pointer.value]
            if len(assigns) != 1 or len(others) != len(increments):
                raise ActionError(f"the pointer {pointer.value} of {name} is not assigned once (then stepped with += in the loop)")
            assign = assigns[0]
            if c.count_name(kdef, pointer.value) != 2 + len(increments):
                raise ActionError(f"the pointer {pointer.value} of {name} is used besides this load and its steps")
            operand.pointer_def = assign
            defined = assign.value
        else:
            defined = pointer
        if edge is not None:
            if edge.offsets not in c.names_in(defined):
                raise ActionError(f"the pointer of {name} does not read its {where} offsets {edge.offsets}")
            # The wrapped rows must address what some program loads unmasked: the pointer may depend on this
            # axis's program id only through the offsets.
            pid_reads = {n for n in reads if any(r.startswith("program_id(") for r in _closure({n}, reads))}
            pid_reads |= {n for read in reads.values() for names in read for n in names if n.startswith("program_id(")}
            axis_ids = _closure(c.names_in(edge.value) | _called_ops(edge.value), reads) & pid_reads
            direct = (c.names_in(defined) | _called_ops(defined)) - {edge.offsets}
            direct |= set().union(*(c.names_in(s.value) for s in steps if s.target.value == getattr(pointer, "value", None)))
            reached = _closure(direct, reads, {edge.offsets})
            if edge.offsets in reached:  # only the offsets the pointer reads by name are wrapped
                raise ActionError(f"the pointer of {name} reads {edge.offsets} through another name")
            if reached & axis_ids:
                raise ActionError(f"the pointer of {name} reads {', '.join(sorted(reached & axis_ids))} besides {edge.offsets}")
        return operand

    @staticmethod
    def _edge(found: tuple[str, str], kdef: cst.FunctionDef, body: list, loop: cst.For, name: str) -> _Edge:
        offsets, size = found
        assign = c.any_assignment(kdef, offsets)
        statement = next((s for s in body[:body.index(loop)] if isinstance(s, cst.SimpleStatementLine)
                          and any(b is assign for b in s.body)), None)
        if assign is None or statement is None or len(statement.body) != 1:
            raise ActionError(f"the offsets {offsets} of {name}'s mask are not assigned once, on their own line, before the K loop")
        if c.any_assignment(kdef, size) is not None or size in c.bound_names(kdef.body):
            raise ActionError(f"{size} is reassigned in the kernel")
        return _Edge(offsets, size, statement, assign.value)

    @staticmethod
    def _check_after_loop(after: list, acc: str, operands: list[_Operand], kdef: cst.FunctionDef,
                          roots: frozenset[str]) -> None:
        """After the loop the accumulator only goes elementwise into stores masked on the same rows and columns."""
        derived = {acc}
        edges = [(op.edge, axis) for op, axis in zip(operands, ("rows", "cols")) if op.edge is not None]
        # Offsets the store may be masked on: the loads' own, or a name assigned the same expression (``offs_cm``).
        same: dict[str, set[str]] = {}
        for edge, _axis in edges:
            same[edge.offsets] = {edge.offsets}
            for other in c.bound_names(kdef.body):
                assign = c.any_assignment(kdef, other)
                if assign is not None and c.flat(assign.value) == c.flat(edge.value):
                    same[edge.offsets].add(other)

        def elementwise(node: cst.CSTNode) -> str | None:
            """Why ``node`` may move values between rows or columns (None when it is elementwise)."""
            problem: list[str] = []

            class V(cst.CSTVisitor):
                def visit_Call(self, n: cst.Call) -> bool:
                    if not (c.names_in(n) & derived):
                        return False
                    op = n.func.attr.value if isinstance(n.func, cst.Attribute) else c.code(n.func)
                    if op not in ELEMENTWISE:
                        problem.append(f"`{c.code(n.func)}`")
                    return True

                def visit_Attribute(self, n: cst.Attribute) -> bool:
                    if c.names_in(n.value) & derived and n.attr.value not in ("to", "cast", "dtype"):
                        problem.append(f"`.{n.attr.value}`")
                    return True

                def visit_Subscript(self, n: cst.Subscript) -> bool:
                    if c.names_in(n.value) & derived:
                        problem.append("a subscript")
                    return True

            node.visit(V())
            return ", ".join(problem) or None

        def masked(mask: cst.BaseExpression | None) -> bool:
            if mask is None:
                return False
            parts = []
            for part in c.conjuncts(mask):
                if isinstance(part, cst.Name) and (a := c.any_assignment(kdef, part.value)) is not None:
                    parts += c.conjuncts(a.value)
                else:
                    parts.append(part)
            for edge, axis in edges:
                if not any(isinstance(p, cst.Comparison) and len(p.comparisons) == 1
                           and isinstance(p.comparisons[0].operator, cst.LessThan)
                           and _broadcast(p.left)[1] == axis and isinstance(_broadcast(p.left)[0], cst.Name)
                           and _broadcast(p.left)[0].value in same[edge.offsets]
                           and c.code(p.comparisons[0].comparator).strip() == edge.size for p in parts):
                    return False
            return True

        stored = False
        for statement in after:
            if not (c.names_in(statement) & derived):
                continue
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
            shown = c.code(statement).strip().splitlines()[0]
            if isinstance(small, cst.Assign | cst.AugAssign):
                value = small.value
                why = elementwise(value)
                if why:
                    raise ActionError(f"after the K loop the accumulator goes through {why} (`{shown}`): wrapped rows "
                                      "or columns could reach kept outputs")
                targets = c.names_in(small.targets[0].target) if isinstance(small, cst.Assign) else c.names_in(small.target)
                derived |= targets
                continue
            call = small.value if isinstance(small, cst.Expr) else None
            if c.is_call(call, "store", roots):
                args = [a for a in call.args if a.keyword is None]
                keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
                pointer = args[0].value if args else keywords.get("pointer")
                value = args[1].value if len(args) > 1 else keywords.get("value")
                if pointer is None or value is None or c.names_in(pointer) & derived:
                    raise ActionError(f"the store `{shown}` is not `tl.store(pointer, value, mask=...)`")
                why = elementwise(value)
                if why:
                    raise ActionError(f"the stored value goes through {why} (`{shown}`)")
                mask = args[2].value if len(args) > 2 else keywords.get("mask")
                if not masked(mask):
                    raise ActionError(f"the store `{shown}` is not masked on the same row and column offsets as the loads")
                stored = True
                continue
            raise ActionError(f"after the K loop `{shown}` uses the accumulator; only elementwise steps and masked stores "
                              "are understood")
        if not stored:
            raise ActionError("the accumulator is never stored after the K loop")

    @staticmethod
    def _name_wraps(operands: list[_Operand], kdef: cst.FunctionDef, loop: cst.For) -> None:
        """Each edge's wrapped name: the offsets themselves when only these loads read them, else a new name."""
        taken = set(c.names_in(kdef)) | {p.name.value for p in kdef.params.params}
        edges = [op.edge for op in operands if op.edge is not None]
        if len(edges) == 2 and edges[0].offsets == edges[1].offsets:
            raise ActionError("A and B are masked on the same offsets")
        for op in operands:
            edge = op.edge
            if edge is None:
                continue
            rewritten = c.count_name(op.pointer_def.value if op.pointer_def is not None else op.pointer, edge.offsets)
            in_masks = sum(c.count_name(o.load, edge.offsets) for o in operands) - sum(
                c.count_name(o.pointer, edge.offsets) for o in operands)
            if c.count_name(kdef, edge.offsets) == 1 + rewritten + in_masks:
                edge.wrapped = edge.offsets
                continue
            letter = "a" if op is operands[0] else "b"
            stem = edge.offsets
            options = [f"{stem[:-1]}{letter}{stem[-1]}" if stem[-1:] in ("m", "n") and stem[:-1] in ("offs_", "r", "off_", "offs")
                       else "", f"{stem}_wrapped"]
            name = next((o for o in options if o and o not in taken), None)
            if name is None:
                raise ActionError(f"no free name for the wrapped {stem}")
            taken.add(name)
            edge.wrapped = name
        for op in operands:
            if op.pointer_def is None:
                name = f"{op.target}_ptrs"
                if name in taken:
                    raise ActionError(f"the kernel already uses {name}")
                taken.add(name)
                op.hoisted = name

    @staticmethod
    def _check_heuristic(kernel: Kernel, kdef: cst.FunctionDef, launches: list, block_k: str) -> None:
        """``@triton.heuristics`` below the autotuner reads BLOCK_K from the config (or the launch) and K from the call."""
        if kernel.jit_call is not None or not any(c.code(d.decorator).split("(")[0].endswith("jit") for d in kdef.decorators):
            raise ActionError(f"{kernel.name} is not decorated with @triton.jit: nowhere to put @triton.heuristics")
        configs = kernel.autotune.configs if kernel.autotune is not None else []
        in_configs = bool(configs) and all(block_k in cfg.kwargs for cfg in configs)
        if in_configs or block_k in kernel.heuristics:
            return
        if not launches or any(c.binding_of(launch, kernel, block_k)[0] == "default" for launch in launches):
            raise ActionError(f"{block_k} is neither in every autotune config nor passed at every launch: "
                              f"the heuristic cannot read it")

    @staticmethod
    def _launch_value(launch: c.LaunchNode, kernel: Kernel, size_k: str, block_k: str) -> tuple[str, bool]:
        """(``K % BLOCK_K == 0`` spelled with what this launch passes, whether the block is a literal there)."""
        if c.kwarg(launch.call, EVEN) is not None:
            raise ActionError(f"a launch already passes {EVEN}")
        return c.divisible_at_launch(launch, kernel, size_k, block_k)

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        try:
            plan = self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError:
            return []
        line = kernel.loops[0].span.start.line if kernel.loops else c.kernel_line(kernel)
        for loop in kernel.loops:
            if any(loop.span.start_offset <= d.span.start_offset < loop.span.end_offset for d in kernel.calls_of("dot")):
                line = loop.span.start.line
                break
        wraps = [op.edge for op in plan.operands if op.edge is not None]
        what = "wrap rows/cols, EVEN_K" if len(wraps) == 2 else "wrap rows, EVEN_K" if wraps and plan.operands[0].edge \
            else "wrap cols, EVEN_K" if wraps else "EVEN_K"
        out = [Candidate(self.name, self.kind, kernel.name, {}, f"Take the masks out of the K loop ({what})", line)]
        if wraps and REORDERING.why_not(analysis, kernel, target) is None:
            out.append(Candidate(self.name, self.kind, kernel.name, {GROUP_PARAM: GROUP},
                                 f"Take the masks out of the K loop ({what}) with grouped program order "
                                 f"({GROUP_PARAM}={GROUP})", line))
        return out

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why the action offers nothing for ``kernel`` (None when it offers something)."""
        try:
            self._plan(c.parse(analysis.text), analysis, kernel)
        except ActionError as exc:
            return str(exc) or "not a masked tl.dot K loop"
        return None

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        if params == {GROUP_PARAM: GROUP}:
            # Grouped order and the unmasked loop pay together (1.04-1.17x) where each alone is about 1.0x, which a
            # loop that keeps only faster steps would reject one at a time: this variant is one step for both.
            self._plan(c.parse(text), analysis, kernel)
            grouped = REORDERING.apply(text, analysis, kernel, dict(params), target)
            regrouped = analyze(grouped.new_text)
            found = regrouped.kernel(kernel.name)
            if found is None:
                raise ActionError(f"{kernel.name} is gone after grouping its programs")
            edit = self._apply(grouped.new_text, regrouped, found)
            return Edit(edit.new_text, changed_line_count(text, edit.new_text), f"{grouped.summary}; {edit.summary}",
                        grouped.notes + edit.notes)
        if params:
            raise ActionError(f"{self.name} takes no parameters or {GROUP_PARAM}={GROUP}, not {c.fmt_params(params)}")
        return self._apply(text, analysis, kernel)

    def _apply(self, text: str, analysis: FileAnalysis, kernel: Kernel) -> Edit:
        module = c.parse(text)
        plan = self._plan(module, analysis, kernel)
        tl = plan.language
        pairs: list[tuple[cst.CSTNode, object]] = []
        # The kernel: wrapped offsets after their own definitions, pointers reading them, the loads' branches.
        new_body: list[cst.BaseStatement] = []
        edges = {id(op.edge.statement): op.edge for op in plan.operands if op.edge is not None}
        substitute = {op.edge.offsets: op.edge.wrapped for op in plan.operands if op.edge is not None}
        pointer_defs = {id(op.pointer_def): op for op in plan.operands if op.pointer_def is not None}
        for statement in plan.kdef.body.body:
            if statement is plan.loop:
                new_body.append(self._new_loop(plan, pointer_defs, substitute))
                continue
            edge = edges.get(id(statement))
            if edge is not None and edge.wrapped == edge.offsets:
                assign = statement.body[0]
                new_body.append(statement.with_changes(body=[assign.with_changes(
                    value=c.expr(f"({c.code(c.unparen(edge.value))}) % {edge.size}"))]))
                continue
            new_body.append(self._with_pointer_defs(statement, pointer_defs, substitute))
            if edge is not None:
                new_body.append(c.stmt(f"{edge.wrapped} = ({c.code(c.unparen(edge.value))}) % {edge.size}"))
        params_list = list(plan.kdef.params.params)
        last = params_list[-1]
        annotation = next((p.annotation for p in params_list if p.name.value == plan.block_k and p.annotation), None)
        new_param = cst.Param(cst.Name(EVEN), annotation=annotation or cst.Annotation(c.expr(f"{tl}.constexpr")),
                              comma=last.comma)
        params_list[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        params_list.append(new_param)
        new_kdef = plan.kdef.with_changes(body=plan.kdef.body.with_changes(body=new_body),
                                          params=plan.kdef.params.with_changes(params=params_list))
        if plan.by_heuristic:
            new_kdef = self._with_heuristic(new_kdef, plan, analysis)
        pairs.append((plan.kdef, new_kdef))
        _kdef, launches = c.locate(module, kernel.name)
        if not plan.by_heuristic:
            for launch, (value, _literal) in zip(launches, plan.launch_values):
                pairs.append((launch.call, c.set_kwarg(launch.call, EVEN, c.expr(value))))
        module = c.replace_all(module, pairs)
        wrapped = ", ".join(f"{op.edge.offsets} % {op.edge.size}" for op in plan.operands if op.edge is not None)
        notes = []
        if any(literal for _value, literal in plan.launch_values):
            notes.append(f"{EVEN} repeats the launch's literal {plan.block_k}: change both together")
        return c.finish(text, module, f"mask-free K loop of {kernel.name} ({wrapped or 'no wrap'}; {EVEN})", notes)

    @staticmethod
    def _with_pointer_defs(statement: cst.BaseStatement, pointer_defs: dict, substitute: dict[str, str]) -> cst.BaseStatement:
        """``statement`` with the loads' pointer definitions reading the wrapped offsets."""
        if not isinstance(statement, cst.SimpleStatementLine):
            return statement
        small = statement.body[0] if len(statement.body) == 1 else None
        op = pointer_defs.get(id(small))
        if op is None or op.edge is None:
            return statement
        return statement.with_changes(body=[small.with_changes(
            value=c.substitute_names(small.value, {op.edge.offsets: op.edge.wrapped}))])

    def _new_loop(self, plan: _Plan, pointer_defs: dict, substitute: dict[str, str]) -> cst.For:
        loop = plan.loop
        by_statement = {id(op.statement): op for op in plan.operands}
        body = list(loop.body.body)
        new_body: list[cst.BaseStatement] = []
        index = 0
        while index < len(body):
            statement = body[index]
            op = by_statement.get(id(statement))
            if op is None:
                new_body.append(self._with_pointer_defs(statement, pointer_defs, substitute))
                index += 1
                continue
            group = [op]
            following = by_statement.get(id(body[index + 1])) if index + 1 < len(body) else None
            if following is not None:
                group.append(following)
            made: list[cst.BaseStatement] = []
            for member in group:
                if member.hoisted:
                    pointer = member.pointer if member.edge is None else c.substitute_names(
                        member.pointer, {member.edge.offsets: member.edge.wrapped})
                    made.append(c.stmt(f"{member.hoisted} = {' '.join(c.code(c.unparen(pointer)).split())}"))
            made.append(self._branches(group, plan))
            made[0] = made[0].with_changes(leading_lines=statement.leading_lines)  # comments above the load stay
            new_body += made
            index += len(group)
        return loop.with_changes(body=loop.body.with_changes(body=new_body))

    @staticmethod
    def _branches(group: list[_Operand], plan: _Plan) -> cst.If:
        """``if EVEN_K: <unmasked loads> else: <loads masked on K only>``."""
        even, masked = [], []
        for op in group:
            pointer = op.hoisted or c.code(op.pointer)
            rest = [f"{a.keyword.value}={' '.join(c.code(a.value).split())}" for a in op.kept_args
                    if a.keyword.value != "other"]
            others = [f"other={' '.join(c.code(a.value).split())}" for a in op.kept_args if a.keyword.value == "other"]
            func = c.code(op.load.func)
            k_part = " ".join(c.code(c.unparen(op.k_part)).split())
            plain = f"{func}({', '.join([pointer, *rest])})"
            with_k = f"{func}({', '.join([pointer, f'mask={k_part}', *others, *rest])})"
            value = op.statement.body[0].value
            even.append(f"{op.target} = {_replaced(value, op.load, plain)}")
            masked.append(f"{op.target} = {_replaced(value, op.load, with_k)}")
        source = f"if {EVEN}:\n" + "".join(f"    {s}\n" for s in even) + "else:\n" + "".join(f"    {s}\n" for s in masked)
        return c.stmt(source)

    @staticmethod
    def _with_heuristic(kdef: cst.FunctionDef, plan: _Plan, analysis: FileAnalysis) -> cst.FunctionDef:
        """``@triton.heuristics({"EVEN_K": ...})`` just above ``@triton.jit``: innermost, after every config and heuristic."""
        triton = next((n for n, dotted in sorted(analysis.names.prefix.items()) if dotted == "triton"), None)
        if triton is None:
            raise ActionError("the file does not import triton by name: nowhere to spell triton.heuristics")
        decorators = list(kdef.decorators)
        jit = next(i for i, d in enumerate(decorators) if c.code(d.decorator).split("(")[0].endswith("jit"))
        entry = f'{triton}.heuristics({{"{EVEN}": lambda args: args["{plan.size_k}"] % args["{plan.block_k}"] == 0}})'
        decorators.insert(jit, cst.Decorator(decorator=c.expr(entry), leading_lines=decorators[jit].leading_lines))
        decorators[jit + 1] = decorators[jit + 1].with_changes(leading_lines=[])
        return kdef.with_changes(decorators=decorators)


def _replaced(value: cst.BaseExpression, load: cst.Call, new_load: str) -> str:
    """The source of ``value`` with its load call written as ``new_load`` (``tl.load(...).to(tl.float16)``)."""
    value = c.unparen(value)
    if value is load:
        return new_load
    return " ".join(c.code(c.replace_all(value, [(load, c.expr(new_load))])).split())


def _add(left: Counter, right: Counter, sign: int) -> Counter:
    out = Counter(left)
    for key, count in right.items():
        out[key] += sign * count
    return Counter({k: v for k, v in out.items() if v})


def _product(a: str, b: str) -> str:
    return "*".join(sorted((a, b)))


ACTION = MaskFreeK()
