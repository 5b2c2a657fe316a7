"""The text a model policy reads: kernel analysis, the target's hardware, the steps so far, the choices."""

from __future__ import annotations

from ..hardware import GpuProfile
from .base import PolicyState

SYSTEM = (
    "You optimize Triton GPU kernels one step at a time. Given a kernel, the target GPU and the "
    "steps taken so far, answer with exactly one of the listed actions: the one that will make "
    "the kernel fastest while staying correct."
)


def hardware_line(target: GpuProfile) -> str:
    """The target's figures that decide tiling and pipelining."""
    features = ",".join(sorted(target.features)) or "none"
    return f"GPU: {target.summary()}; features {features}."


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
    """The request: the state and the actions the micro coder can carry out right now."""
    return "\n".join(state_lines(state) + ["Actions: " + "; ".join(choices), "Next action:"])


def plain_prompt(state: PolicyState, choices: list[str]) -> str:
    """A prompt for base models without a chat template."""
    return f"{SYSTEM}\n\n{user_message(state, choices)} "
