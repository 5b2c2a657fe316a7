"""Where a launch's grid repeats a block size as a literal (``(triton.cdiv(n, 64),)`` with ``BLOCK=64``).

A grid that divides by the same number the launch passes as a block size is derived from that
block size even though it does not name it. ``literal_sites`` finds every such literal (the divisor
of a ``cdiv`` or a factor of it, ``cdiv(n, 256 * UNROLL)``, or both numbers of ``(n + 63) // 64``) and says which block parameter each belongs
to: by value when only one block has it, else by the size the grid divides (the kernel masks or
``tl.cdiv``s that size against the block), else by the grid axis (``pid_m = tl.program_id(0)``,
``pid_m * BLOCK_M``). Any other use of the number in the grid makes the grid ambiguous: no sites.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import libcst as cst

from ..analysis import Kernel


@dataclass(frozen=True)
class Site:
    """One literal in a grid that stands for ``block + offset`` (offset -1 in ``n + 63``)."""

    node: cst.Integer
    block: str
    offset: int = 0


def _code(node: cst.CSTNode) -> str:
    return "".join(cst.Module(body=[]).code_for_node(node).split())


def _int(node: cst.CSTNode) -> int | None:
    if isinstance(node, cst.Integer):
        try:
            return int(node.evaluated_value)
        except ValueError:
            return None
    return None


def _is_cdiv(call: cst.Call) -> bool:
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return name == "cdiv" and len(call.args) == 2 and all(a.keyword is None for a in call.args)


class _Collect(cst.CSTVisitor):
    """Integer nodes of the grid, and which of them are divisors (with their dividend's code)."""

    def __init__(self, values: set[int]):
        self.values = values
        self.all: list[cst.Integer] = []
        self.divisors: dict[int, tuple[cst.Integer, str, int]] = {}  # id -> (node, dividend code, offset)
        self.axis_of: dict[int, int] = {}  # id(node) -> top-level grid tuple index
        self._axis: int | None = None

    def visit_Integer(self, node: cst.Integer) -> None:
        v = _int(node)
        if v is not None and (v in self.values or v + 1 in self.values):  # ``63`` may be part of ``(n + 63) // 64``
            self.all.append(node)
        if self._axis is not None:
            self.axis_of[id(node)] = self._axis

    def visit_Call(self, node: cst.Call) -> None:
        if not _is_cdiv(node):
            return
        divisor = node.args[1].value
        if _int(divisor) in self.values:
            self.divisors[id(divisor)] = (divisor, _code(node.args[0].value), 0)
        elif isinstance(divisor, cst.BinaryOperation) and isinstance(divisor.operator, cst.Multiply):
            # ``cdiv(n, 256 * UNROLL)``: each program covers the block a fixed number of times.
            for factor in (divisor.left, divisor.right):
                if _int(factor) in self.values:
                    self.divisors[id(factor)] = (factor, _code(node.args[0].value), 0)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if not isinstance(node.operator, cst.FloorDivide) or _int(node.right) not in self.values:
            return
        v = _int(node.right)
        left = node.left
        # (A + 63) // 64  or  (A + (64 - 1)) // 64  or  (A + 64 - 1) // 64
        if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Add) and _int(left.right) == v - 1:
            self.divisors[id(node.right)] = (node.right, _code(left.left), 0)
            self.divisors[id(left.right)] = (left.right, _code(left.left), -1)
        elif isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Add) and isinstance(left.right, cst.BinaryOperation) \
                and isinstance(left.right.operator, cst.Subtract) and _int(left.right.left) == v and _int(left.right.right) == 1:
            self.divisors[id(node.right)] = (node.right, _code(left.left), 0)
            self.divisors[id(left.right.left)] = (left.right.left, _code(left.left), 0)
        elif isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Subtract) and _int(left.right) == 1 \
                and isinstance(left.left, cst.BinaryOperation) and isinstance(left.left.operator, cst.Add) and _int(left.left.right) == v:
            self.divisors[id(node.right)] = (node.right, _code(left.left.left), 0)
            self.divisors[id(left.left.right)] = (left.left.right, _code(left.left.left), 0)


def _grid_tuple(grid: cst.BaseExpression) -> cst.BaseExpression:
    return grid.body if isinstance(grid, cst.Lambda) else grid


def kernel_pairs(kernel: Kernel) -> tuple[dict[str, set[str]], dict[str, int]]:
    """(block -> size params it is compared with or cdiv'ed against, block -> program_id axis)."""
    fn = kernel.node
    blocks = {p.name for p in kernel.params if p.kind == "constexpr"}
    scalars = {p.name for p in kernel.params if p.kind != "constexpr"}
    if fn is None:
        return {}, {}
    # Which blocks each local name depends on (transitively, in assignment order, a few rounds).
    depends: dict[str, set[str]] = {b: {b} for b in blocks}
    assigns = [n for n in ast.walk(fn) if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign) and n.value is not None]

    def deps(node: ast.AST) -> set[str]:
        out: set[str] = set()
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                out |= depends.get(n.id, set())
        return out

    for _ in range(3):
        for a in assigns:
            targets = a.targets if isinstance(a, ast.Assign) else [a.target]
            d = deps(a.value)
            for t in targets:
                if isinstance(t, ast.Name) and t.id not in blocks:
                    depends[t.id] = depends.get(t.id, set()) | d
    sizes: dict[str, set[str]] = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], ast.Lt | ast.LtE | ast.Gt | ast.GtE):
            left, right = n.left, n.comparators[0]
            for side, other in ((left, right), (right, left)):
                if isinstance(other, ast.Name) and other.id in scalars:
                    d = deps(side)
                    if len(d) == 1:
                        sizes.setdefault(next(iter(d)), set()).add(other.id)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "cdiv" and len(n.args) == 2:
            a, b = n.args
            if isinstance(a, ast.Name) and a.id in scalars and isinstance(b, ast.Name) and b.id in blocks:
                sizes.setdefault(b.id, set()).add(a.id)
    pid_axis: dict[str, int] = {}
    for a in assigns:
        if isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name):
            axis = _program_id_axis(a.value)
            if axis is not None:
                pid_axis[a.targets[0].id] = axis
    axes: dict[str, int] = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
            for x, y in ((n.left, n.right), (n.right, n.left)):
                axis = pid_axis.get(x.id) if isinstance(x, ast.Name) else _program_id_axis(x)
                if axis is not None and isinstance(y, ast.Name) and y.id in blocks:
                    axes[y.id] = axis if axes.get(y.id, axis) == axis else -1
    return sizes, {b: a for b, a in axes.items() if a >= 0}


def _program_id_axis(node: ast.AST) -> int | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "program_id":
        arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "axis"), None)
        if isinstance(arg, ast.Constant) and isinstance(arg.value, int):
            return arg.value
    return None


def literal_sites(grid: cst.BaseExpression, kernel: Kernel, values: dict[str, int],
                  size_sources: dict[str, str]) -> tuple[list[Site], str | None]:
    """The grid literals that stand for the given blocks (name -> value), or why they cannot be told apart.

    ``size_sources`` maps the kernel's size parameters to the (whitespace-free) source the launch
    passes for them, so ``cdiv(M, 64)`` can be matched to ``BLOCK_M`` through ``offs_m < M``.
    """
    by_value: dict[int, list[str]] = {}
    for name, value in values.items():
        by_value.setdefault(value, []).append(name)
    body = _grid_tuple(grid)
    collect = _Collect(set(by_value))
    elements = body.elements if isinstance(body, cst.Tuple) else None
    if elements is not None:
        for axis, element in enumerate(elements):
            collect._axis = axis
            element.value.visit(collect)
    else:
        body.visit(collect)
    sizes, axes = kernel_pairs(kernel)
    sites: list[Site] = []
    for node in collect.all:
        hit = collect.divisors.get(id(node))
        v = _int(node)
        if hit is None:
            if v in by_value:
                return [], f"the grid uses {v} for something other than dividing by the block size"
            continue  # a number one below a block value that is not part of ``(n + 63) // 64``
        _node, dividend, offset = hit
        owners = by_value[v - offset] if offset else by_value[v]
        if len(owners) > 1:
            matched = [b for b in owners if any(size_sources.get(s) == dividend for s in sizes.get(b, ()))]
            if len(matched) != 1:
                axis = collect.axis_of.get(id(node))
                matched = [b for b in owners if axis is not None and axes.get(b) == axis and len(elements or ()) > 1]
            if len(matched) != 1:
                return [], f"the grid divides by {v - offset} for {' and '.join(sorted(owners))}; name the block sizes first"
            owners = matched
        sites.append(Site(node, owners[0], offset))
    return sites, None
