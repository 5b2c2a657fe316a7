"""Facts about one kernel for hover and code lens: configurations, shared-memory estimate, intensity."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..optimizer.analysis import FileAnalysis, Kernel
from ..optimizer.analysis.model import Value
from ..optimizer.hardware import KIB, GpuProfile

# Triton's defaults when a launch or config does not say (CUDA backend).
DEFAULT_NUM_WARPS = 4
DEFAULT_NUM_STAGES = 3
# Dot operands in Triton kernels are usually fp16/bf16; the estimate says "est." for this reason.
ASSUMED_DOT_OPERAND_BYTES = 2

_TILE_NAME = re.compile(r"^(?:BLOCK|TILE)(?:_SIZE)?_?([MNK])$", re.IGNORECASE)


@dataclass
class KernelConfig:
    """One way the kernel runs: an autotune config or one launch site's constexprs and options."""

    label: str  # "config 0" or "launch in matmul (line 52)"
    constexprs: dict[str, Value]
    num_warps: int | None
    num_stages: int | None
    launch_scalars: dict[str, Value]  # scalar arguments with known values (shapes)


def kernel_configs(analysis: FileAnalysis, kernel: Kernel) -> list[KernelConfig]:
    """Autotune configs when the kernel has them, else one entry per launch site."""
    launches = analysis.launches_of(kernel.name)
    scalars: dict[str, Value] = {}
    for launch in launches:
        for arg in launch.args:
            param = kernel.param(arg.param) if arg.param else None
            if param is not None and param.kind == "scalar" and isinstance(arg.value, (int, float)):
                scalars.setdefault(param.name, arg.value)
    defaults = {p.name: p.default_value for p in kernel.params if p.kind == "constexpr" and p.default_value is not None}
    if kernel.autotune is not None and kernel.autotune.configs:
        return [
            KernelConfig(f"config {i}", {**defaults, **c.kwargs}, c.num_warps, c.num_stages, scalars)
            for i, c in enumerate(kernel.autotune.configs)
        ]
    configs = []
    for launch in launches:
        where = launch.host_function or "module"
        configs.append(
            KernelConfig(
                f"launch in {where} (line {launch.span.start.line + 1})",
                launch.constexpr_values(kernel), launch.num_warps, launch.num_stages,
                {a.param: a.value for a in launch.args if a.param and isinstance(a.value, (int, float))},
            )
        )
    return configs


def tile_sizes(kernel: Kernel, constexprs: dict[str, Value]) -> dict[str, int]:
    """``{"M": 128, "N": 256, "K": 64}`` from constexprs named like BLOCK_M / BLOCK_SIZE_N / TILE_K."""
    tiles: dict[str, int] = {}
    for name in kernel.constexpr_names:
        match = _TILE_NAME.match(name)
        value = constexprs.get(name)
        if match and isinstance(value, int) and not isinstance(value, bool):
            tiles[match.group(1).upper()] = value
    return tiles


def estimate_shared_bytes(kernel: Kernel, config: KernelConfig) -> int | None:
    """Shared memory for the ``tl.dot`` operand buffers, one set per pipeline stage; None if unknown.

    Triton stages both dot operands through shared memory (``num_stages`` copies when the loop is
    pipelined), so a tile of BLOCK_M x BLOCK_K plus BLOCK_K x BLOCK_N dominates the budget.
    """
    if not kernel.calls_of("dot"):
        return 0 if not kernel.calls_of(*_REDUCTIONS) else None
    tiles = tile_sizes(kernel, config.constexprs)
    if not {"M", "N", "K"} <= tiles.keys():
        return None
    in_loop = any(c.loop_depth > 0 for c in kernel.calls_of("dot"))
    stages = config.num_stages if config.num_stages is not None else DEFAULT_NUM_STAGES
    buffers = max(stages, 1) if in_loop else 1
    per_stage = (tiles["M"] * tiles["K"] + tiles["K"] * tiles["N"]) * ASSUMED_DOT_OPERAND_BYTES
    return buffers * per_stage


_REDUCTIONS = ("sum", "max", "min", "argmax", "argmin", "reduce", "cumsum", "cumprod", "associative_scan")


def arithmetic_intensity(kernel: Kernel, config: KernelConfig, element_bytes: int = ASSUMED_DOT_OPERAND_BYTES) -> float | None:
    """FLOP per byte of a matmul-like kernel when the launch gives M, N and K; None otherwise."""
    if not kernel.calls_of("dot"):
        return None
    shape = {k: v for k, v in config.launch_scalars.items() if k in ("M", "N", "K") and isinstance(v, int) and v > 0}
    if len(shape) != 3:
        return None
    m, n, k = shape["M"], shape["N"], shape["K"]
    return 2 * m * n * k / ((m * k + k * n + m * n) * element_bytes)


def format_bytes(n: int) -> str:
    if n >= KIB and n % KIB == 0 or n >= 10 * KIB:
        return f"{n / KIB:.0f} KiB"
    if n >= KIB:
        return f"{n / KIB:.1f} KiB"
    return f"{n} B"


def max_shared_estimate(analysis: FileAnalysis, kernel: Kernel) -> int | None:
    """The largest estimate over the kernel's configs (None when none can be estimated)."""
    values = [v for c in kernel_configs(analysis, kernel) if (v := estimate_shared_bytes(kernel, c)) is not None]
    return max(values) if values else None


def lens_title(analysis: FileAnalysis, kernel: Kernel, target: GpuProfile, compiled_shared: int | None = None) -> str:
    """One line: ``matmul_kernel · 3 launches · 4 configs · est. 16 KiB smem · H100``."""
    launches = len(analysis.launches_of(kernel.name))
    parts = [kernel.name, f"{launches} launch" + ("" if launches == 1 else "es")]
    if kernel.autotune is not None:
        n = len(kernel.autotune.configs)
        parts.append(f"{n} autotune config" + ("" if n == 1 else "s") if kernel.autotune.configs_are_literal else "autotuned")
    if compiled_shared is not None:
        parts.append(f"{format_bytes(compiled_shared)} smem ({target.sm_name})")
    else:
        smem = max_shared_estimate(analysis, kernel)
        if smem:
            over = " > limit" if smem > target.max_shared_per_block else ""
            parts.append(f"est. {format_bytes(smem)} smem{over}")
    parts.append(target.key.upper())
    return " · ".join(parts)
