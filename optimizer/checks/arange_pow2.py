"""MTMC101: ``tl.arange`` sizes and block shapes must be powers of 2 (literals, launches, defaults, configs)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .bindings import CheckContext, evaluate
from .finding import Finding, make_finding
from .kernel_facts import fast_walk
from .num_warps_pow2 import is_power_of_2

CODE = "MTMC101"
SEVERITY = "error"
TITLE = "block size is not a power of 2"


def _next_power_of_2(value: int) -> int:
    return 1 if value <= 1 else 1 << (value - 1).bit_length()


def _suggest(value: int) -> str:
    lower = 1 << (value.bit_length() - 1) if value > 0 else 1
    return f"{lower} or {lower * 2}" if lower != value else str(value)


def check(ctx: CheckContext) -> Iterator[Finding]:
    seen: set[tuple[int, int]] = set()
    for kernel in ctx.analysis.kernels:
        facts = ctx.facts(kernel)
        if facts is None:
            continue
        # (what, size expression, the call it belongs to)
        sizes: list[tuple[str, ast.AST, ast.Call]] = []
        for call in facts.aranges:
            if len(call.args) == 2:
                sizes.append(("tl.arange size", ast.BinOp(call.args[1], ast.Sub(), call.args[0]), call))
        for call, shape in facts.shape_tuples:
            dims = shape.elts if isinstance(shape, ast.Tuple | ast.List) else [shape]
            for dim in dims:
                sizes.append(("block shape dimension", dim, call))
        for what, expr, call in sizes:
            names = {n.id for n in fast_walk(expr) if isinstance(n, ast.Name)}
            for binding in ctx.bindings(kernel):
                size = evaluate(expr, ctx.env(kernel, binding))
                if size is None or is_power_of_2(size):
                    continue
                set_here = [n for n in sorted(names) if n in binding.where and binding.where[n] is not None]
                if set_here:
                    span = binding.where[set_here[0]]
                    origin = " (" + ", ".join(f"{n}={binding.values.get(n)} from {binding.origin(n)}" for n in set_here) + ")"
                else:
                    span = ctx.node_span(kernel, facts, call)
                    origin = ""
                key = (span.start_offset, span.end_offset)
                if key in seen:
                    continue
                seen.add(key)
                line = ctx.node_span(kernel, facts, call).start.line + 1
                yield make_finding(
                    CODE, SEVERITY, span,
                    f"{what} {size} at line {line} in {kernel.name} is not a power of 2{origin}; "
                    f"Triton requires power-of-2 block sizes: use {_suggest(size)} and mask the remainder",
                    kernel.name, size=size, names=set_here, suggestion=_next_power_of_2(size),
                    lower=_next_power_of_2(size) // 2, upper=_next_power_of_2(size),
                )
