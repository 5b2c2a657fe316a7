"""The contract every optimization action follows: find candidates, then apply one as an edit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile

# The MTMC macro types (QiMeng-Kernel) plus the extra kinds this project implements.
KINDS = ("Tiling", "Pipelining", "Warps", "Reordering", "Fusion", "Autotune", "TensorCore", "Hoist", "Precision", "Prepare")


class ActionError(Exception):
    """An action's preconditions do not hold for this text (stale, or not provable)."""


@dataclass(frozen=True)
class Candidate:
    """One concrete, applicable action: what the policy ranks and the micro coder applies."""

    action: str  # registry name: "tiling"
    kind: str  # one of KINDS
    kernel: str
    params: dict[str, Value]
    title: str  # "Apply tiling for H100 (BLOCK_M=128, BLOCK_N=256, BLOCK_K=64)"
    line: int  # 0-based line of the region the action edits (for "at line N" in prompts)
    changes_numerics: bool = False

    def key(self) -> str:
        """A stable, compact identifier: ``tiling(matmul_kernel; BLOCK_K=64, BLOCK_M=128)``."""
        params = ", ".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.action}({self.kernel}; {params})"

    def to_json(self) -> dict:
        return {
            "action": self.action, "kind": self.kind, "kernel": self.kernel, "params": dict(self.params),
            "title": self.title, "line": self.line, "changesNumerics": self.changes_numerics,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Candidate":
        return cls(
            action=data["action"], kind=data["kind"], kernel=data["kernel"], params=dict(data["params"]),
            title=data["title"], line=int(data["line"]), changes_numerics=bool(data.get("changesNumerics", False)),
        )


@dataclass
class Edit:
    """The result of applying one candidate: the whole new text and what changed."""

    new_text: str
    changed_lines: int
    summary: str
    notes: list[str] = field(default_factory=list)


class Action(Protocol):
    """One optimization, in one module under ``optimizer/actions/``."""

    name: str
    kind: str
    changes_numerics: bool
    # Optional ``keeps_interface = True``: the edit keeps the kernel's parameters, their meaning and its
    # grid contract (a launch value, a hint, a body rewrite with the same results), so it is safe for
    # kernels other modules launch too. Actions without it are not offered on such kernels
    # (``actions.interface_conflict``). Optional ``why_not(analysis, kernel, target) -> str | None``: why
    # ``candidates`` is empty, for ``mtmc actions --why`` (``actions.refusals``). Optional ``pays_with``: actions
    # measured to pay together with this one where each alone does not (the search keeps a slower step for them).
    # Optional ``sweeps_variants = "<param>"``: candidates that differ only in that parameter (a tile) are variants
    # of one step, and whether it pays depends on which: the search verifies them side by side (``search.try_ranked``).

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        """The concrete parameterisations that apply to ``kernel`` on ``target`` (empty when none)."""
        ...

    def apply(self, text: str, analysis: FileAnalysis, kernel: Kernel, params: dict[str, Value], target: GpuProfile) -> Edit:
        """Rewrite ``text`` (through libcst, keeping formatting); raise ``ActionError`` when it cannot."""
        ...
