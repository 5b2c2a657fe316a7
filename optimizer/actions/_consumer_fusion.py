"""What the actions that fold a consumer kernel into its producer share: one candidate per consumer."""

from __future__ import annotations

from typing import Any

from ..analysis import FileAnalysis, Kernel
from ..analysis.model import Value
from ..hardware import GpuProfile
from . import _common as c
from .base import ActionError, Candidate


class ConsumerFusion:
    """Base of row_fusion and matmul_epilogue: subclasses say which consumers to try (``_pairs``), how
    to fold one (``_plan``, raising ActionError when it cannot) and what the step is called (``_title``)."""

    name = ""
    kind = "Fusion"
    changes_numerics = False

    def _pairs(self, analysis: FileAnalysis, kernel: Kernel) -> list[str]:
        raise NotImplementedError

    def _plan(self, module, analysis: FileAnalysis, producer: Kernel, consumer_name: str) -> Any:
        raise NotImplementedError

    def _title(self, plan: Any, kernel: Kernel, consumer: str) -> str:
        raise NotImplementedError

    def candidates(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> list[Candidate]:
        module = c.parse(analysis.text)
        out = []
        for consumer in self._pairs(analysis, kernel):
            try:
                plan = self._plan(module, analysis, kernel, consumer)
            except ActionError:
                continue
            out.append(Candidate(self.name, self.kind, kernel.name, {"consumer": consumer},
                                 self._title(plan, kernel, consumer), kernel.calls_of("store")[0].span.start.line))
        return out

    def why_not(self, analysis: FileAnalysis, kernel: Kernel, target: GpuProfile) -> str | None:
        """Why no consumer folds into ``kernel`` (None when one does): each consumer tried, with its reason."""
        module = c.parse(analysis.text)
        reasons = []
        for consumer in self._pairs(analysis, kernel):
            try:
                self._plan(module, analysis, kernel, consumer)
            except ActionError as exc:
                reasons.append(f"{kernel.name} -> {consumer}: {exc}")
            else:
                return None
        return "; ".join(reasons) or "no other kernel is launched after it in the same host function"


def consumer_param(action: str, params: dict[str, Value]) -> str:
    """The consumer kernel a fusing action's params name."""
    consumer = params.get("consumer")
    if not isinstance(consumer, str):
        raise ActionError(f"{action} needs params {{'consumer': kernel name}}")
    return consumer
