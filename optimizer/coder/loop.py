"""LLM goals inside the MTMC loop: the policy ranks them with the rule actions, the coder writes the chosen one.

``mtmc optimize --llm-goal "..."`` adds one candidate per goal, ``llm(goal=...)``, to the actions
that apply at each state; the policy scores it like any other (its grammar names it), and when it
is tried, ``LlmCoder.rewrite`` asks the model for the diff. A refused answer is an attempt that
could not be applied (the loop tries the next candidate); an accepted one is verified and kept or
rejected by the same rules as a rule step.
"""

from __future__ import annotations

from typing import Callable

from ..actions import ActionError, Candidate, Edit, applicable, apply_candidate
from ..analysis import FileAnalysis
from ..hardware import GpuProfile
from .coder import ACTION_NAME, LlmCoder, goal_kind
from .errors import CoderError


def goal_candidates(analysis: FileAnalysis, kernel_name: str, goals: list[str]) -> list[Candidate]:
    """One ``llm`` candidate per goal for ``kernel_name`` (none when the kernel is not in the file)."""
    kernel = analysis.kernel(kernel_name)
    if kernel is None:
        return []
    line = kernel.def_span.start.line
    return [
        Candidate(action=ACTION_NAME, kind=goal_kind(goal), kernel=kernel.name, params={"goal": goal},
                  title=f"LLM: {goal} ({kernel.name})", line=line)
        for goal in dict.fromkeys(" ".join(g.split()) for g in goals) if goal
    ]


def loop_hooks(coder: LlmCoder, goals: list[str], allow_precision: bool = False,
               file_name: str = "kernel.py") -> dict[str, Callable]:
    """``candidates`` and ``apply`` for ``search.optimize``: the rule actions plus the goals."""

    def candidates(analysis: FileAnalysis, kernel: str, target: GpuProfile) -> list[Candidate]:
        return applicable(analysis, kernel, target, allow_precision) + goal_candidates(analysis, kernel, goals)

    def apply(text: str, candidate: Candidate, target: GpuProfile) -> Edit:
        if candidate.action != ACTION_NAME:
            return apply_candidate(text, candidate, target)
        try:
            return coder.rewrite(text, candidate.kernel, str(candidate.params["goal"]), target, file_name).edit
        except CoderError as exc:
            raise ActionError(f"the LLM coder's answer was refused: {exc}") from exc

    return {"candidates": candidates, "apply": apply}
