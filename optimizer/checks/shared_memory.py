"""MTMC104: the dot tiles times num_stages need more shared memory than one block may have on the target."""

from __future__ import annotations

from collections.abc import Iterator

from .context import DEFAULT_NUM_STAGES, CheckContext, evaluate
from .finding import Finding, make_finding

CODE = "MTMC104"
SEVERITY = "warning"
TITLE = "estimated shared memory over the target's limit"


def estimate(m: int, n: int, k: int, a_bytes: int, b_bytes: int, stages: int) -> int:
    """Triton's own rule of thumb (matmul tutorial pruning): both operand tiles, once per stage."""
    return (m * k * a_bytes + k * n * b_bytes) * stages


def check(ctx: CheckContext) -> Iterator[Finding]:
    limit = ctx.target.max_shared_per_block
    for kernel in ctx.analysis.kernels:
        facts = ctx.facts(kernel)
        if facts is None:
            continue
        for dot, a_shape, b_shape in facts.dot_tiles():
            a_bytes, a_known = facts.dtype_bytes(dot.a)
            b_bytes, b_known = facts.dtype_bytes(dot.b)
            worst = None
            for binding in ctx.bindings(kernel):
                env = ctx.env(kernel, binding)
                m, k = (evaluate(d, env) for d in a_shape)
                n = evaluate(b_shape[1], env)
                if None in (m, k, n):
                    continue
                loop_stages = evaluate(dot.loop_num_stages, env) if dot.loop_num_stages is not None else None
                stages = loop_stages or binding.num_stages or DEFAULT_NUM_STAGES
                if dot.loop_depth == 0:
                    stages = 1  # no loop, nothing to pipeline
                need = estimate(m, n, k, a_bytes, b_bytes, stages)
                if need > limit and (worst is None or need > worst[0]):
                    worst = (need, binding, m, n, k, stages)
            if worst is None:
                continue
            need, binding, m, n, k, stages = worst
            if a_known and b_known:
                dtype_note = f"{a_bytes}-byte and {b_bytes}-byte elements"
            else:
                dtype_note = f"assuming {a_bytes}-byte (fp16/bf16) elements where the dtype is not visible"
            span = binding.fallback if binding.kind != "defaults" else ctx.node_span(kernel, facts, dot.node)
            yield make_finding(
                CODE, SEVERITY, span,
                f"{kernel.name}: tl.dot tiles {m}x{k} and {k}x{n} x {stages} stages need about {need:,} bytes of "
                f"shared memory under {binding.label} ({dtype_note}), over the {ctx.target.name}'s "
                f"{limit:,}-byte limit per block; lower num_stages or BLOCK_K",
                kernel.name, bytes=need, limit=limit, stages=stages, tile=[m, n, k], binding=binding.label,
            )
