"""Per-document step history, kept in the workspace under ``.mtmc/history/`` so it survives a restart.

Each step records the candidate, the text before and after, its status (applied | accepted |
rejected), the verification result (set later by the verifier) and timestamps. ``reject`` reverts
exactly that step's hunks in the current text (a 3-way revert: later edits elsewhere stay); when a
later edit rewrote those lines it explains which step did, and changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .actions.base import Candidate
from .edits import changed_line_count, three_way_revert

HISTORY_DIR = Path(".mtmc") / "history"
STATUSES = ("applied", "accepted", "rejected")
FORMAT_VERSION = 1


class HistoryError(Exception):
    """A step cannot be found, or cannot be reverted in the current text (the message says why)."""


@dataclass
class StepRecord:
    """One applied optimization step of one document."""

    id: str
    index: int  # 1-based, per document
    kernel: str
    candidate: Candidate
    text_before: str
    text_after: str
    status: str = "applied"
    summary: str = ""
    verification: dict[str, Any] | None = None
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)

    @property
    def title(self) -> str:
        return self.candidate.title

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "index": self.index, "kernel": self.kernel, "title": self.title, "summary": self.summary,
            "status": self.status, "candidate": self.candidate.to_json(), "textBefore": self.text_before,
            "textAfter": self.text_after, "verification": self.verification, "created": self.created,
            "updated": self.updated, "changedLines": changed_line_count(self.text_before, self.text_after),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "StepRecord":
        return cls(
            id=data["id"], index=int(data["index"]), kernel=data["kernel"],
            candidate=Candidate.from_json(data["candidate"]), text_before=data["textBefore"],
            text_after=data["textAfter"], status=data.get("status", "applied"), summary=data.get("summary", ""),
            verification=data.get("verification"), created=float(data.get("created", 0.0)),
            updated=float(data.get("updated", 0.0)),
        )


class StepHistory:
    """The steps of one document, loaded from and saved to ``<workspace>/.mtmc/history/``."""

    def __init__(self, workspace_root: str | os.PathLike, document_path: str | os.PathLike):
        self.root = Path(workspace_root).resolve()
        self.document = Path(document_path).resolve() if Path(document_path).is_absolute() else (self.root / document_path).resolve()
        self.path = self.root / HISTORY_DIR / self._file_name()
        self._steps: list[StepRecord] = self._load()

    def _file_name(self) -> str:
        try:
            relative = self.document.relative_to(self.root).as_posix()
        except ValueError:  # a document outside the workspace
            relative = self.document.as_posix().lstrip("/")
        digest = hashlib.sha1(relative.encode()).hexdigest()[:8]
        readable = relative.replace("/", "__")[-80:]
        return f"{readable}.{digest}.json"

    # ---- storage --------------------------------------------------------------------------------
    def _load(self) -> list[StepRecord]:
        if not self.path.exists():
            return []
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return [StepRecord.from_json(s) for s in data.get("steps", [])]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # A damaged history is set aside, never silently overwritten.
            broken = self.path.with_suffix(f".broken-{int(time.time())}.json")
            try:
                self.path.replace(broken)
            except OSError:
                pass
            raise HistoryError(f"history file {self.path} was unreadable ({exc}); moved to {broken.name}") from exc

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"version": FORMAT_VERSION, "document": str(self.document), "steps": [s.to_json() for s in self._steps]}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
        os.replace(tmp, self.path)  # atomic: a crash leaves the old file or the new one

    # ---- queries --------------------------------------------------------------------------------
    def steps(self) -> list[StepRecord]:
        return list(self._steps)

    def get(self, step_id: str) -> StepRecord:
        step = next((s for s in self._steps if s.id == step_id), None)
        if step is None:
            raise HistoryError(f"no step {step_id!r} in the history of {self.document.name}")
        return step

    def baseline(self) -> str | None:
        """The text a verification compares with: the last accepted step's, else the text before step 1."""
        accepted = [s for s in self._steps if s.status == "accepted"]
        if accepted:
            return accepted[-1].text_after
        return self._steps[0].text_before if self._steps else None

    # ---- changes --------------------------------------------------------------------------------
    def record(self, candidate: Candidate, text_before: str, text_after: str, summary: str = "") -> StepRecord:
        """Add an applied step."""
        if text_before == text_after:
            raise HistoryError("the step changes nothing")
        step = StepRecord(
            id=uuid.uuid4().hex[:12], index=len(self._steps) + 1, kernel=candidate.kernel, candidate=candidate,
            text_before=text_before, text_after=text_after, summary=summary,
        )
        self._steps.append(step)
        self._save()
        return step

    def set_verification(self, step_id: str, result: dict[str, Any]) -> StepRecord:
        step = self.get(step_id)
        step.verification = dict(result)
        step.updated = time.time()
        self._save()
        return step

    def accept(self, step_id: str) -> StepRecord:
        step = self.get(step_id)
        if step.status == "rejected":
            raise HistoryError(f"step {step.index} was rejected; apply it again to keep it")
        step.status = "accepted"
        step.updated = time.time()
        self._save()
        return step

    def reject(self, step_id: str, current_text: str) -> str:
        """The current text with exactly this step reverted (later steps kept when they still apply)."""
        step = self.get(step_id)
        if step.status == "rejected":
            raise HistoryError(f"step {step.index} is already rejected")
        reverted, reason = three_way_revert(step.text_before, step.text_after, current_text)
        if reverted is None:
            later = [s for s in self._steps if s.index > step.index and s.status != "rejected"
                     and three_way_revert(step.text_before, step.text_after, s.text_after)[0] is None]
            blame = "; ".join(f"step {s.index} ({s.title})" for s in later)
            hint = f" - changed by {blame}; reject that first" if blame else " - the document was edited there since"
            raise HistoryError(f"cannot revert step {step.index} ({step.title}): {reason}{hint}")
        step.status = "rejected"
        step.updated = time.time()
        self._save()
        return reverted

    # ---- display --------------------------------------------------------------------------------
    def show(self) -> str:
        """A short table of the steps: index, status, verification, changed lines, title."""
        if not self._steps:
            return f"no steps for {self.document.name}"
        lines = [f"steps of {self.document.name}:"]
        for s in self._steps:
            verdict = (s.verification or {}).get("status") or (s.verification or {}).get("state") or "unverified"
            stamp = time.strftime("%H:%M:%S", time.localtime(s.created))
            lines.append(
                f"  {s.index:>2}  {s.id}  {s.status:<8}  {verdict:<10}  "
                f"{changed_line_count(s.text_before, s.text_after):>3} lines  {stamp}  {s.title}"
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"document": str(self.document), "steps": [s.to_json() for s in self._steps]}
