"""Steps of each document: proposals in memory, applied steps in ``optimizer.history`` (.mtmc/history).

A step is proposed when its edit is computed (code action resolve, ``mtmc.applyCandidate``,
``mtmc.optimizeKernel``) and recorded in the document's history only once the client really
applied it: the document must then hold the step's text after, so a declined or partly applied
edit is never recorded. Edits the client applies on its own (code actions) are recorded by the
document change that produces their text, since a client may drop the action's
``mtmc.stepApplied`` command (VS Code does while its Refactor Preview is open); the command then
finds the step already recorded.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..optimizer.actions import Candidate, Edit
    from ..optimizer.history import StepHistory, StepRecord

# optimizer.actions (and the policy and history, which import it) load libcst: imported where used,
# so the server starts fast and small.

# VerificationReport.status -> the state the editor shows for a step.
VERIFICATION_STATES = {
    "verified": "passed", "incorrect": "failed", "compile_error": "failed", "timeout": "failed", "crash": "failed",
    "error": "failed", "no_harness": "skipped", "cancelled": "cancelled", "superseded": "cancelled",
}
PROPOSAL_TTL_S = 3600.0
# Proposals kept at most (each holds two copies of the document): code action requests come with
# every cursor move over a diagnostic, and an edit is applied right after it is offered.
MAX_PROPOSALS = 128
# Attached to every offered step; runs after the client applied the edit, records and verifies it.
STEP_APPLIED_COMMAND = "mtmc.stepApplied"


@dataclass
class Proposal:
    """A step's edit as offered to the client, not applied yet."""

    token: str
    uri: str
    index: int  # the index it will get in the history
    candidate: Candidate
    text_before: str
    text_after: str
    summary: str
    version_before: int | None
    # True when the client applies the edit itself (code actions): a document change that yields
    # ``text_after`` records the step. Edits the server sends (workspace/applyEdit) record it there.
    record_on_change: bool = False
    created: float = field(default_factory=time.time)

    @property
    def label(self) -> str:
        """The change annotation's label: ``MTMC step 2: Apply tiling for H100 (...)``."""
        return f"MTMC step {self.index}: {self.candidate.title}"


def step_label(step: StepRecord) -> str:
    return f"MTMC step {step.index}: {step.title}"


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
    """Histories per document URI (under the workspace root) and the proposals not applied yet."""

    def __init__(self, locate: Callable[[str], tuple[Path | None, Path]], report: Callable[[str], None] | None = None):
        # uri -> (workspace root or None for in memory, document path): where the history lives.
        self._locate = locate
        # Tells the user about a history that could not be used (set aside, or kept in memory).
        self._report = report or (lambda message: None)
        self._histories: dict[str, StepHistory] = {}
        self._proposals: dict[str, Proposal] = {}
        # Tokens of recorded proposals -> (uri, step id, when): a repeated record finds the step again.
        self._recorded: dict[str, tuple[str, str, float]] = {}

    def history(self, uri: str) -> StepHistory:
        from ..optimizer.history import StepHistory

        history = self._histories.get(uri)
        if history is None:
            root, path = self._locate(uri)
            history = self._histories[uri] = StepHistory(root, path)
            if history.problem:
                self._report(history.problem)
        return history

    def steps(self, uri: str) -> list[StepRecord]:
        return self.history(uri).steps()

    def get(self, uri: str, step_id: str) -> StepRecord:
        return self.history(uri).get(step_id)  # HistoryError when unknown

    def propose(self, uri: str, version: int | None, candidate: Candidate, before: str, edit: Edit,
                token: str | None = None, record_on_change: bool = False) -> Proposal:
        """Remember an edit about to be offered; ``token`` finds it again once the client applied it."""
        now = time.time()
        self._proposals = {k: p for k, p in self._proposals.items() if now - p.created < PROPOSAL_TTL_S}
        self._recorded = {k: r for k, r in self._recorded.items() if now - r[2] < PROPOSAL_TTL_S}
        while len(self._proposals) >= MAX_PROPOSALS:  # dicts keep insertion order: the oldest goes
            del self._proposals[next(iter(self._proposals))]
        proposal = Proposal(token or uuid.uuid4().hex[:12], uri, len(self.steps(uri)) + 1, candidate, before,
                            edit.new_text, edit.summary, version, record_on_change)
        self._proposals[proposal.token] = proposal
        return proposal

    def record(self, token: str, current_text: str) -> tuple[StepRecord | None, str]:
        """Record proposal ``token`` as an applied step if the document now holds its text after.

        The reason is "applied" for a newly recorded step and "already recorded" when ``token``'s
        step was recorded before (by a document change or an earlier call).
        """
        from ..optimizer.history import HistoryError

        if token in self._recorded:
            uri, step_id, _ = self._recorded[token]
            try:
                return self.get(uri, step_id), "already recorded"
            except HistoryError as exc:
                return None, str(exc)
        proposal = self._proposals.get(token)
        if proposal is None:
            return None, "unknown or expired step"
        if current_text != proposal.text_after:
            return None, "the document does not hold the step's edit (declined or partly applied)"
        del self._proposals[token]
        try:
            step = self.history(proposal.uri).record(proposal.candidate, proposal.text_before, proposal.text_after,
                                                     proposal.summary)
        except HistoryError as exc:
            return None, str(exc)
        self._recorded[token] = (proposal.uri, step.id, time.time())
        return step, "applied"

    def record_changed(self, uri: str, current_text: str) -> StepRecord | None:
        """Record the client-applied proposal of ``uri`` whose text after the document now holds.

        Several offered actions can produce the same text (and one action may be resolved twice):
        the newest is recorded and the others' tokens then find that same step.
        """
        matching = [p for p in self._proposals.values()
                    if p.uri == uri and p.record_on_change and p.text_after == current_text]
        if not matching:
            return None
        newest = max(matching, key=lambda p: p.created)
        step, _ = self.record(newest.token, current_text)
        if step is not None:
            for proposal in matching:
                if proposal is not newest:
                    del self._proposals[proposal.token]
                    self._recorded[proposal.token] = (uri, step.id, time.time())
        return step

    def set_verification(self, uri: str, step_id: str, result: dict[str, Any]) -> StepRecord:
        return self.history(uri).set_verification(step_id, result)

    def baseline(self, uri: str) -> str | None:
        return self.history(uri).baseline()

    def forget(self, uri: str) -> None:
        """Drop a closed document's history from memory unless memory is the only place it lives."""
        history = self._histories.get(uri)
        if history is not None and history.persistent:
            del self._histories[uri]
