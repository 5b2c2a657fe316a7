"""The text a model policy reads: kernel analysis, the target's hardware, the steps so far, the choices."""

from __future__ import annotations

from ..hardware import GpuProfile
from .base import PolicyState

# Short on purpose: every prompt token costs ~4 ms of CPU on the 135M model (benchmarks/results/policy_latency.md).
SYSTEM = "Choose the next optimization step for a Triton GPU kernel: the one that makes it fastest and keeps it correct."

# Hardware features that change which optimizations pay off (the others are listed in the profile).
DECISIVE_FEATURES = ("cp.async", "tma", "wgmma", "fp8")


def hardware_line(target: GpuProfile) -> str:
    """The target's figures that decide tiling and pipelining, compactly."""
    features = " ".join(f for f in DECISIVE_FEATURES if target.has(f)) or "no async copies"
    return (f"GPU {target.name} {target.sm_name}: {target.sm_count} SMs, {target.max_shared_per_block // 1024} KiB "
            f"shared, {target.memory_bandwidth_gbs / 1000:.1f} TB/s, {features}.")


def state_lines(state: PolicyState) -> list[str]:
    """Kernel analysis, then history: the most stable parts first, so the prompt's prefix cache hits."""
    lines = [hardware_line(state.target), "Kernel " + state.features.summary()]
    if state.history:
        lines.append("Steps so far:")
        lines.extend(f"{i + 1}. {step.line()}" for i, step in enumerate(state.history))
    else:
        lines.append("Steps so far: none.")
    return lines


def user_message(state: PolicyState, choices: list[str]) -> str:
    """The request: the state, the actions the micro coder can carry out now (when listed), the question."""
    listed = ["Actions: " + "; ".join(choices)] if choices else []
    return "\n".join(state_lines(state) + listed + ["Next action:"])


def numbered_message(state: PolicyState, choices: list[str]) -> str:
    """Multiple choice for chat endpoints: answer with the number of the action."""
    lines = state_lines(state) + ["Actions:"] + [f"{i}. {c}" for i, c in enumerate(choices, start=1)]
    return "\n".join(lines + ["Answer with the number of the best next action only."])


def plain_prompt_prefix() -> str:
    """What every plain prompt starts with."""
    return f"{SYSTEM}\n\n"


def plain_prompt(state: PolicyState, choices: list[str]) -> str:
    """A prompt for base models without a chat template; the action follows on the next line."""
    return f"{plain_prompt_prefix()}{user_message(state, choices)}\n"
