"""MTMC102: ``tl.dot`` needs every operand dimension to be at least 16 (tensor-core tile minimum)."""

from __future__ import annotations

from collections.abc import Iterator

from ..triton_rules import MIN_DOT_DIM
from .bindings import CheckContext, evaluate
from .finding import Finding, make_finding

CODE = "MTMC102"
SEVERITY = "error"
TITLE = "tl.dot operand dimension under 16"


def check(ctx: CheckContext) -> Iterator[Finding]:
    for kernel in ctx.analysis.kernels:
        facts = ctx.facts(kernel)
        if facts is None:
            continue
        for dot, a_shape, b_shape in facts.dot_tiles():  # shapes unknown or 3-D batched dots: quiet
            reported = False
            for binding in ctx.bindings(kernel):
                env = ctx.env(kernel, binding)
                m, k = (evaluate(d, env) for d in a_shape)
                k2, n = (evaluate(d, env) for d in b_shape)
                dims = {"M": m, "N": n, "K": k if k is not None else k2}
                small = {axis: v for axis, v in dims.items() if v is not None and v < MIN_DOT_DIM}
                if not small or reported:
                    continue
                reported = True
                shown = ", ".join(f"{axis}={v}" for axis, v in small.items())
                yield make_finding(
                    CODE, SEVERITY, ctx.node_span(kernel, facts, dot.node),
                    f"tl.dot in {kernel.name} has {shown} under {binding.label} "
                    f"(operands {m}x{k} and {k2}x{n}); tl.dot needs M, N and K >= {MIN_DOT_DIM}: "
                    f"raise the block sizes to at least {MIN_DOT_DIM}",
                    kernel.name, dims={a: v for a, v in dims.items()}, binding=binding.label,
                )
