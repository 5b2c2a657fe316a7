"""Optimization steps of each document: proposed (pending), applied, accepted or rejected, and verified.

A step is proposed when its edit is computed (code action resolve, ``mtmc.applyCandidate``,
``mtmc.optimizeKernel``) and recorded once the client really applied it: the document text must
then equal the step's text after, so a declined or partially applied edit is never recorded.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..optimizer.actions import Candidate, Edit

# VerificationReport.status -> the state the editor shows for a step.
VERIFICATION_STATES = {
    "verified": "passed", "incorrect": "failed", "compile_error": "failed", "timeout": "failed", "crash": "failed",
    "error": "failed", "no_harness": "skipped", "cancelled": "cancelled", "superseded": "cancelled",
}


@dataclass
class Step:
    """One step on one document."""

    id: str
    index: int  # 1-based, per document
    uri: str
    kernel: str
    candidate: Candidate
    title: str
    summary: str
    text_before: str
    text_after: str
    version_before: int | None
    status: str = "proposed"  # proposed | applied | accepted | rejected
    verification: dict[str, Any] = field(default_factory=lambda: {"state": "pending"})
    created: float = field(default_factory=time.time)

    @property
    def label(self) -> str:
        """The change annotation's label: ``MTMC step 2: Apply tiling for H100 (...)``."""
        return f"MTMC step {self.index}: {self.title}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "index": self.index, "uri": self.uri, "kernel": self.kernel, "title": self.title,
            "summary": self.summary, "status": self.status, "candidate": self.candidate.to_json(),
            "textBefore": self.text_before, "textAfter": self.text_after, "verification": dict(self.verification),
        }


def verification_json(report) -> dict[str, Any]:
    """A VerificationReport as the step view reads it: the report plus ``state`` and the speed-up."""
    data = report.to_json() if hasattr(report, "to_json") else dict(report)
    data["state"] = VERIFICATION_STATES.get(data.get("status", ""), "failed")
    speed = data.get("speed") or {}
    if speed.get("believed") and speed.get("speedup") is not None:
        data["speedup"] = speed["speedup"]
        data["beforeMs"], data["afterMs"] = speed.get("baseline_ms"), speed.get("candidate_ms")
    return data


class StepStore:
    """Every document's steps for this session, plus the proposals not applied yet."""

    def __init__(self) -> None:
        self._steps: dict[str, list[Step]] = {}
        self._proposed: dict[str, Step] = {}  # by token

    def steps(self, uri: str) -> list[Step]:
        return [s for s in self._steps.get(uri, [])]

    def get(self, uri: str, step_id: str) -> Step | None:
        return next((s for s in self._steps.get(uri, []) if s.id == step_id), None)

    def prepare(self, uri: str, version: int | None, candidate: Candidate, before: str, edit: Edit,
                token: str | None = None) -> Step:
        """A proposed step for an edit about to be offered; ``token`` finds it again once applied."""
        index = len(self._steps.get(uri, [])) + 1
        step = Step(
            id=uuid.uuid4().hex[:12], index=index, uri=uri, kernel=candidate.kernel, candidate=candidate,
            title=candidate.title, summary=edit.summary, text_before=before, text_after=edit.new_text,
            version_before=version,
        )
        self._proposed[token or step.id] = step
        # Old proposals (actions offered but never applied) are dropped after a while.
        cutoff = time.time() - 3600
        self._proposed = {k: s for k, s in self._proposed.items() if s.created >= cutoff}
        return step

    def proposed(self, token: str) -> Step | None:
        return self._proposed.get(token)

    def record(self, token: str, current_text: str) -> tuple[Step | None, str]:
        """Record the proposal ``token`` as applied if the document now holds its text after."""
        step = self._proposed.get(token)
        if step is None:
            return None, "unknown or expired step"
        if current_text != step.text_after:
            return None, "the document does not hold the step's edit (declined or partly applied)"
        del self._proposed[token]
        steps = self._steps.setdefault(step.uri, [])
        step.index = len(steps) + 1
        step.status = "applied"
        steps.append(step)
        return step, "applied"

    def baseline(self, uri: str) -> str | None:
        """The text verification compares against: the last accepted step, else the text before step 1."""
        steps = self._steps.get(uri, [])
        accepted = [s for s in steps if s.status == "accepted"]
        if accepted:
            return accepted[-1].text_after
        return steps[0].text_before if steps else None

    def forget(self, uri: str) -> None:
        self._steps.pop(uri, None)
