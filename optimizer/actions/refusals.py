"""Why an action offers nothing for a kernel: what ``mtmc actions --why`` prints.

On code the engine has not seen, "no tiling here" is only useful with its reason ("BLOCK: the launch
computes the block size"), so the user can rewrite the spelling or know the step does not fit.
Actions explain themselves through an optional ``why_not(analysis, kernel, target)``; the offers
``applicable`` filters out (another module launches the kernel, a kernel jitted by a call) carry
the filter's reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..analysis import FileAnalysis, Kernel
from ..analysis.workspace import with_foreign_launches
from ..hardware import GpuProfile
from .base import ActionError


@dataclass(frozen=True)
class Refusal:
    """One action that offers nothing for a kernel, and why (``reason`` is empty when the action cannot say)."""

    action: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"action": self.action, "reason": self.reason}


def refusals(analysis: FileAnalysis, kernel: Kernel, target: GpuProfile, allow_precision: bool = False) -> list[Refusal]:
    """Every registered action that offers no candidate for ``kernel`` on ``target``, in registry order."""
    from . import ACTIONS, interface_conflict, spelling_conflict

    if not analysis.foreign_searched:
        analysis = with_foreign_launches(analysis)
    out: list[Refusal] = []
    for name, action in ACTIONS.items():
        if action.changes_numerics and not allow_precision:
            out.append(Refusal(name, "changes numerics: listed only on request (--allow-precision)"))
            continue
        try:
            found = action.candidates(analysis, kernel, target)
        except ActionError as exc:
            out.append(Refusal(name, str(exc)))
            continue
        if found:
            conflicts = [interface_conflict(analysis, c) or spelling_conflict(analysis, c) for c in found]
            if all(conflicts):
                out.append(Refusal(name, str(conflicts[0])))
            continue
        why_not = getattr(action, "why_not", None)
        reason = None
        if why_not is not None:
            try:
                reason = why_not(analysis, kernel, target)
            except ActionError as exc:
                reason = str(exc)
        out.append(Refusal(name, reason or ""))
    return out
