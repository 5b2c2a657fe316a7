"""MTMC103: a load/store without a mask whose offsets come from ``tl.program_id`` while a size is in scope."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from .bindings import CheckContext
from .finding import Finding, make_finding
from .kernel_facts import fast_walk

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
            chain = ", ".join(via) if via else "tl.program_id"
            bound_list = ", ".join(bounds)
            yield make_finding(
                CODE, SEVERITY, ctx.node_span(kernel, facts, op.node),
                f"tl.{op.op} in {kernel.name} has no mask, but its offsets come from tl.program_id (via {chain}) "
                f"and {bound_list} {'is' if len(bounds) == 1 else 'are'} in scope: the last program reads or writes "
                f"past the end unless the size is a multiple of the block; add mask=... < {bounds[0]}",
                kernel.name, op=op.op, bounds=bounds, via=via,
            )


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
