"""MTMC103: a load/store without a mask whose offsets come from ``tl.program_id`` while a size is in scope."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from .bindings import CheckContext
from .finding import Finding, make_finding
from .kernel_facts import HINT_OPS, fast_walk
from .whole_tiles import in_whole_tiles, one_line_helpers

CODE = "MTMC103"
SEVERITY = "warning"
TITLE = "unmasked load/store on program-id offsets"

# Scalar parameters that read as an extent (n_elements, M, N, K, n_rows, seq_len ...), not a stride.
_SIZE_NAME = re.compile(
    r"^(?:[MNKLTBHD]|n|size|numel|length|total)$|n_|num_|_size$|size_|len|numel|elements|rows|cols|count",
    re.IGNORECASE,
)


def is_size_name(name: str) -> bool:
    return not name.lower().startswith("stride") and bool(_SIZE_NAME.search(name))


def check(ctx: CheckContext) -> Iterator[Finding]:
    helpers: dict | None = None  # the file's one-line @triton.jit helpers, read when a mask-free loop needs them
    for kernel in ctx.analysis.kernels:
        bounds = [p.name for p in kernel.params if p.kind == "scalar" and is_size_name(p.name)]
        if not bounds:
            continue
        facts = ctx.facts(kernel)
        if facts is None:
            continue
        for op in facts.memory_ops:
            if op.has_mask or op.block_pointer or op.guarded_by_constexpr or op.pointer is None:
                continue
            via = sorted(
                {n.id for n in fast_walk(op.pointer) if isinstance(n, ast.Name) and n.id in facts.program_id_names}
            )
            direct = any(
                isinstance(n, ast.Call) and facts.tl_op(n.func) == "program_id" for n in fast_walk(op.pointer)
            )
            if not via and not direct:
                continue
            if _is_block_pointer(facts, op.pointer):
                continue
            if not facts.shape_of(op.pointer):
                continue  # one element per program (``out_ptr + row``): the grid bounds it, no block overruns
            if not direct and _bounded(facts, op.pointer):
                continue  # a head or batch index beside offsets wrapped into range (lightllm's tl.where(offs < M, offs, 0))
            chain = ", ".join(via) if via else "tl.program_id"
            bound_list = ", ".join(bounds)
            in_scope = f"{bound_list} {'is' if len(bounds) == 1 else 'are'} in scope"
            moves = direct or _tile_moves(facts, op.pointer, set(kernel.constexpr_names))
            if helpers is None:
                helpers = one_line_helpers([f.fn for k in ctx.analysis.kernels if (f := ctx.facts(k)) is not None])
            if not moves and in_whole_tiles(facts, op, {p.name: p.kind for p in kernel.params}, bounds, helpers):
                continue  # a mask-free main loop over whole tiles of a row (FlagGems' norms, mask_free_k's K loop)
            bound = _compared_bound(facts, op.pointer, bounds)
            if not moves:
                # The program ids only pick a row, head or batch (times a stride): no tile moves with them, so the
                # risk is the block itself (a row or head-dim vector) being longer than what it indexes.
                message = (f"tl.{op.op} in {kernel.name} has no mask on its block of offsets; the program ids ({chain}) "
                           f"only pick a row, head or batch and {in_scope}: it reads or writes past the end unless the "
                           f"block is exactly as long as the dimension it indexes; add mask=... < {bound}")
            else:
                message = (f"tl.{op.op} in {kernel.name} has no mask, but its offsets come from tl.program_id (via "
                           f"{chain}) and {in_scope}: the last program reads or writes past the end unless the size "
                           f"is a multiple of the block; add mask=... < {bound}")
            yield make_finding(CODE, SEVERITY, ctx.node_span(kernel, facts, op.node), message,
                               kernel.name, op=op.op, bounds=bounds, via=via)


def _compared_bound(facts, pointer: ast.AST, bounds: list[str]) -> str:
    """The size the kernel compares this access's offsets with elsewhere (``mask = offs < N`` for the last tile),
    else the first size parameter: the bound a mask here would name."""
    names = {n.id for n in fast_walk(pointer) if isinstance(n, ast.Name)}
    for name in list(names):  # one level down: ptrs = base + offs
        names |= {n.id for value in facts.assignments.get(name, []) for n in fast_walk(value) if isinstance(n, ast.Name)}
    for node in fast_walk(facts.fn):
        if isinstance(node, ast.Compare) and len(node.comparators) == 1 and isinstance(node.ops[0], ast.Lt | ast.LtE):
            left, right = node.left, node.comparators[0]
            left = left.value if isinstance(left, ast.Subscript) else left  # offs[:, None] < M
            if isinstance(left, ast.Name) and left.id in names and isinstance(right, ast.Name) and right.id in bounds:
                return right.id
    return bounds[0]


def _is_block_pointer(facts, pointer: ast.AST) -> bool:
    """Pointers made by tl.make_block_ptr / tl.advance carry their own bounds (boundary_check)."""
    stack, seen = [pointer], set()
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call) and facts.tl_op(node.func) in ("make_block_ptr", "advance"):
            return True
        if isinstance(node, ast.Name) and node.id not in seen:
            seen.add(node.id)
            stack.extend(facts.assignments.get(node.id, [])[:2])
    return False


def _bounded(facts, node: ast.AST, depth: int = 0) -> bool:
    """No offset in ``node`` can pass the end: its program-id values are scalars (one head, batch or row per
    program) and each block of offsets in it was clamped into range (``tl.where(offs < M, offs, 0)``, ``% M``)."""
    if depth > 20:
        return False
    kind = node.__class__
    if kind is ast.Constant:
        return True
    if kind is ast.Name:
        if facts.clamped(node.id):
            return True
        shape = facts.shape_of(node)
        if shape == ():
            return True  # a scalar: a head, batch or row index, a stride, a base pointer
        if node.id not in facts.program_id_names:
            return False  # a block of offsets no clamp bounds (tl.arange(0, BLOCK) against a size)
        values = facts.assignments.get(node.id, [])
        return bool(values) and all(_bounded(facts, v, depth + 1) for v in values if not _mentions(v, node.id))
    if kind is ast.BinOp:
        return _bounded(facts, node.left, depth + 1) and _bounded(facts, node.right, depth + 1)
    if kind is ast.Subscript:  # offs[:, None]
        return _bounded(facts, node.value, depth + 1)
    if kind is ast.Call and node.args:
        if facts.tl_op(node.func) in HINT_OPS:  # tl.multiple_of(offs, B)
            return _bounded(facts, node.args[0], depth + 1)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "to":  # offs.to(tl.int64)
            return _bounded(facts, node.func.value, depth + 1)
    return False


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in fast_walk(node))


def _tile_moves(facts, node: ast.AST, blocks: set[str], depth: int = 0) -> bool:
    """Whether a tile of ``node``'s offsets moves with the program id: a program-id value times a constexpr
    (``pid * BLOCK``), directly or through the names it is built from. A program id times a stride only picks a row."""
    if depth > 20:
        return True
    kind = node.__class__
    if kind is ast.Name:
        if node.id not in facts.program_id_names or facts.clamped(node.id):
            return False
        values = facts.assignments.get(node.id, [])
        return not values or any(_tile_moves(facts, v, blocks, depth + 1) for v in values if not _mentions(v, node.id))
    if kind is ast.BinOp:
        if node.op.__class__ in (ast.Mult, ast.LShift):
            sides = (node.left, node.right)
            names = {n.id for side in sides for n in fast_walk(side) if isinstance(n, ast.Name)}
            pid = any(n in facts.program_id_names for n in names) or any(
                isinstance(n, ast.Call) and facts.tl_op(n.func) == "program_id" for side in sides for n in fast_walk(side))
            if pid and names & blocks:
                return True
        return _tile_moves(facts, node.left, blocks, depth + 1) or _tile_moves(facts, node.right, blocks, depth + 1)
    if kind is ast.Call and facts.tl_op(node.func) == "program_id":
        return False
    return any(_tile_moves(facts, child, blocks, depth + 1) for child in ast.iter_child_nodes(node)
               if isinstance(child, ast.expr))
