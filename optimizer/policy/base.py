"""The policy contract: given the state of one kernel and the actions that apply now, rank them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from ..actions.base import Candidate
from ..analysis import FileAnalysis, Kernel
from ..hardware import GpuProfile
from .features import KernelFeatures, kernel_features


@dataclass(frozen=True)
class StepOutcome:
    """One step already taken on this kernel, with what verification measured."""

    candidate: Candidate
    compiled: bool | None
    correct: bool | None
    speedup: float | None  # None when speed was not measured (no GPU)
    reward: float | None
    kept: bool

    def line(self) -> str:
        """``tiling(BLOCK_M=64) -> compiled, correct, speed not measured, kept``."""
        parts = [candidate_text(self.candidate)]
        parts.append({True: "compiled", False: "compile failed", None: "not compiled"}[self.compiled])
        parts.append({True: "correct", False: "WRONG", None: "correctness unknown"}[self.correct])
        parts.append(f"{self.speedup:.2f}x" if self.speedup is not None else "speed not measured")
        parts.append("kept" if self.kept else "rejected")
        return parts[0] + " -> " + ", ".join(parts[1:])


@dataclass
class PolicyState:
    """What the macro policy sees: the file, the kernel, the target GPU and the steps so far."""

    analysis: FileAnalysis
    kernel: Kernel
    target: GpuProfile
    history: list[StepOutcome] = field(default_factory=list)
    _features: KernelFeatures | None = field(default=None, repr=False)

    @property
    def features(self) -> KernelFeatures:
        if self._features is None:
            self._features = kernel_features(self.analysis, self.kernel)
        return self._features

    def summary(self) -> dict[str, Any]:
        """The JSON state summary recorded in trajectories."""
        return {
            "kernel": self.features.to_json(),
            "target": self.target.key,
            "history": [h.line() for h in self.history],
        }


@dataclass
class Ranked:
    """One candidate with the policy's score (higher is better) and, for model policies, its log-probability."""

    candidate: Candidate
    score: float
    logprob: float | None = None
    reason: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate.to_json(), "text": candidate_text(self.candidate), "score": self.score,
            "logprob": self.logprob, "reason": self.reason, "metadata": dict(self.metadata),
        }


class Policy(ABC):
    """Macro thinking: decides which applicable action to take next."""

    name: str = "policy"

    @abstractmethod
    def rank(self, state: PolicyState, candidates: list[Candidate]) -> list[Ranked]:
        """Every candidate, best first (ties keep the input order)."""

    @abstractmethod
    def describe(self) -> str:
        """One line for users and logs: what this policy is, and whether it is trained."""

    @property
    def trained(self) -> bool:
        """False while the ranking carries no learned preference (say so in the UI)."""
        return True

    @property
    def status(self) -> str:
        """"ready", "not loaded", "loading" or "failed" (only model policies load anything)."""
        return "ready"

    def start_loading(self) -> None:
        """Begin loading in the background; cheap policies have nothing to load."""

    def close(self) -> None:
        """Release what the policy holds (a model, a connection)."""


def candidate_text(candidate: Candidate) -> str:
    """The action as the policy writes it: ``tiling(BLOCK_K=64, BLOCK_M=128)``, parameters sorted."""
    params = ", ".join(f"{k}={v}" for k, v in sorted(candidate.params.items()))
    return f"{candidate.action}({params})"


def candidate_texts(candidates: list[Candidate]) -> list[str]:
    """A distinct text per candidate: the region's line and then the kernel disambiguate repeats."""
    texts = [candidate_text(c) for c in candidates]
    if len(set(texts)) < len(texts):
        texts = [f"{t} at line {c.line + 1}" for t, c in zip(texts, candidates)]
    if len(set(texts)) < len(texts):
        texts = [f"{t} in {c.kernel}" for t, c in zip(texts, candidates)]
    if len(set(texts)) < len(texts):
        texts = [f"{t} #{i + 1}" for i, t in enumerate(texts)]
    return texts


def sort_ranked(ranked: list[Ranked]) -> list[Ranked]:
    """Best first; stable, so equal scores keep the order the actions were offered in."""
    return sorted(ranked, key=lambda r: -r.score)
