"""MTMC104: the dot tiles times num_stages need more shared memory than one block may have on the target."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..analysis import Kernel
from ..triton_rules import dot_shared_bytes, pipeline_stages
from .bindings import Binding, CheckContext, evaluate
from .finding import Finding, make_finding

CODE = "MTMC104"
SEVERITY = "warning"
TITLE = "estimated shared memory over the target's limit"


@dataclass
class DotNeed:
    """One ``tl.dot`` under one binding: its tile, element sizes, stages and shared-memory estimate."""

    dot: object
    binding: Binding
    m: int
    n: int
    k: int
    a_bytes: int
    b_bytes: int
    dtype_known: bool
    stages: int
    bytes: int


def dot_needs(ctx: CheckContext, kernel: Kernel, binding: Binding) -> list[DotNeed]:
    """Every dot of ``kernel`` whose tile is known under ``binding`` (the check and hover share it)."""
    facts = ctx.facts(kernel)
    if facts is None:
        return []
    env = ctx.env(kernel, binding)
    needs = []
    for dot, a_shape, b_shape in facts.dot_tiles():
        m, k = (evaluate(d, env) for d in a_shape)
        n = evaluate(b_shape[1], env)
        if None in (m, k, n):
            continue
        a_bytes, a_known = facts.dtype_bytes(dot.a)
        b_bytes, b_known = facts.dtype_bytes(dot.b)
        loop_stages = evaluate(dot.loop_num_stages, env) if dot.loop_num_stages is not None else None
        stages = pipeline_stages(dot.loop_depth, loop_stages, binding.num_stages)
        needs.append(DotNeed(dot, binding, m, n, k, a_bytes, b_bytes, a_known and b_known, stages,
                             dot_shared_bytes(m, n, k, a_bytes, b_bytes, stages)))
    return needs


def check(ctx: CheckContext) -> Iterator[Finding]:
    limit = ctx.target.max_shared_per_block
    for kernel in ctx.analysis.kernels:
        facts = ctx.facts(kernel)
        if facts is None:
            continue
        worst: dict[int, DotNeed] = {}  # per dot: the binding that needs the most, over the limit
        for binding in ctx.bindings(kernel):
            for need in dot_needs(ctx, kernel, binding):
                if need.bytes > limit and (id(need.dot) not in worst or need.bytes > worst[id(need.dot)].bytes):
                    worst[id(need.dot)] = need
        for dot, _a_shape, _b_shape in facts.dot_tiles():  # in source order
            need = worst.get(id(dot))
            if need is None:
                continue
            binding = need.binding
            if need.dtype_known:
                dtype_note = f"{need.a_bytes}-byte and {need.b_bytes}-byte elements"
            else:
                dtype_note = f"assuming {need.a_bytes}-byte (fp16/bf16) elements where the dtype is not visible"
            span = binding.fallback if binding.kind != "defaults" else ctx.node_span(kernel, facts, need.dot.node)
            yield make_finding(
                CODE, SEVERITY, span,
                f"{kernel.name}: tl.dot tiles {need.m}x{need.k} and {need.k}x{need.n} x {need.stages} stages need about "
                f"{need.bytes:,} bytes of shared memory under {binding.label} ({dtype_note}), over the "
                f"{ctx.target.name}'s {limit:,}-byte limit per block; lower num_stages or BLOCK_K",
                kernel.name, bytes=need.bytes, limit=limit, stages=need.stages, tile=[need.m, need.n, need.k],
                binding=binding.label,
            )
