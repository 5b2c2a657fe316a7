"""Facts about one kernel for hover and code lens, computed with the checks' own shape model.

Shared-memory figures use the same tile shapes, element sizes, bindings and rule as check MTMC104,
so the code lens and the diagnostic never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..optimizer.analysis import FileAnalysis, Kernel
from ..optimizer.checks.bindings import Binding, CheckContext
from ..optimizer.checks.shared_memory import dot_needs
from ..optimizer.hardware import KIB, GpuProfile

__all__ = ["BindingFacts", "binding_facts", "format_bytes", "lens_title"]


@dataclass
class BindingFacts:
    """One way the kernel runs (launch, autotune config or defaults) and what it costs."""

    binding: Binding
    shared_bytes: int | None  # estimated dot-operand shared memory; None when shapes are unknown
    tile: tuple[int, int, int] | None  # (M, N, K) of the largest dot
    dtype_known: bool
    shape: dict[str, int]  # scalar launch arguments with constant values (M, N, K ...)


def binding_facts(ctx: CheckContext, kernel: Kernel) -> list[BindingFacts]:
    """Every binding of ``kernel`` with its shared-memory estimate (0 when the kernel has no dot)."""
    facts = ctx.facts(kernel)
    out = []
    for binding in ctx.bindings(kernel):
        shared: int | None = 0 if facts is not None and not facts.dots else None
        tile, dtype_known = None, True
        for need in dot_needs(ctx, kernel, binding):
            if shared is None or need.bytes > shared:
                shared, tile, dtype_known = need.bytes, (need.m, need.n, need.k), need.dtype_known
        out.append(BindingFacts(binding, shared, tile, dtype_known, _launch_shape(ctx.analysis, kernel, binding)))
    return out


def _launch_shape(analysis: FileAnalysis, kernel: Kernel, binding: Binding) -> dict[str, int]:
    if binding.kind != "launch":
        launches = analysis.launches_of(kernel.name)
    else:
        launches = [l for l in analysis.launches_of(kernel.name) if l.span == binding.fallback]
    shape: dict[str, int] = {}
    for launch in launches:
        for arg in launch.args:
            param = kernel.param(arg.param) if arg.param else None
            if param is not None and param.kind == "scalar" and isinstance(arg.value, int) and not isinstance(arg.value, bool):
                shape.setdefault(param.name, arg.value)
    return shape


def arithmetic_intensity(facts: BindingFacts, element_bytes: int = 2) -> float | None:
    """FLOP per byte of a matmul when the launch gives M, N and K as constants; None otherwise."""
    if facts.tile is None:
        return None
    dims = {k: facts.shape.get(k) for k in ("M", "N", "K")}
    if any(not isinstance(v, int) or v <= 0 for v in dims.values()):
        return None
    m, n, k = dims["M"], dims["N"], dims["K"]
    return 2 * m * n * k / ((m * k + k * n + m * n) * element_bytes)


def format_bytes(n: int) -> str:
    if n < KIB:
        return f"{n} B"
    value = n / KIB
    return f"{value:.0f} KiB" if value >= 10 or value == int(value) else f"{value:.1f} KiB"


def lens_title(ctx: CheckContext, kernel: Kernel, target: GpuProfile, compiled_shared: int | None = None) -> str:
    """One line: ``matmul_kernel · 3 launches · 4 autotune configs · est. 16 KiB smem · H100``."""
    analysis = ctx.analysis
    launches = len(analysis.launches_of(kernel.name))
    parts = [kernel.name, f"{launches} launch" + ("" if launches == 1 else "es")]
    if kernel.autotune is not None:
        n = len(kernel.autotune.configs)
        parts.append(f"{n} autotune config" + ("" if n == 1 else "s") if kernel.autotune.configs_known else "autotuned")
    if compiled_shared is not None:
        parts.append(f"{format_bytes(compiled_shared)} smem ({target.sm_name})")
    else:
        estimates = [f.shared_bytes for f in binding_facts(ctx, kernel) if f.shared_bytes]
        if estimates:
            smem = max(estimates)
            over = f" > {format_bytes(target.max_shared_per_block)} limit" if smem > target.max_shared_per_block else ""
            parts.append(f"est. {format_bytes(smem)} smem{over}")
    parts.append(target.key.upper())
    return " · ".join(parts)
