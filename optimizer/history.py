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
# A history is a few texts per step; anything far larger is not one of ours.
MAX_HISTORY_BYTES = 256 << 20
# Temporaries older than this belong to a writer that died before its rename.
STALE_TEMPORARY_S = 600.0


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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


def state_dir(workspace_root: str | os.PathLike, *parts: str) -> Path | None:
    """``<workspace>/.mtmc/<parts>``, or None when a symlink on the way leads out of the workspace."""
    root = Path(workspace_root).resolve()
    folder = root / ".mtmc" / Path(*parts) if parts else root / ".mtmc"
    # resolve() follows every symlink that exists: a `.mtmc` (or a folder below it) pointing
    # elsewhere would make the server write outside the workspace.
    if not folder.resolve().is_relative_to(root):
        return None
    return folder


class StepHistory:
    """The steps of one document, loaded from and saved to ``<workspace>/.mtmc/history/``.

    With ``workspace_root=None`` (an untitled document, one outside every workspace folder, or a
    ``.mtmc`` that leads out of the workspace) the history lives in memory only. A history file
    that cannot be read is moved aside to ``*.broken-<time>.json`` and ``problem`` says so.
    """

    def __init__(self, workspace_root: str | os.PathLike | None, document_path: str | os.PathLike):
        self.problem: str | None = None
        document = Path(document_path)
        if workspace_root is None:
            self.root = None
            self.document = document.resolve() if document.is_absolute() else document
            self.path = None
            self._steps: list[StepRecord] = []
            return
        self.root = Path(workspace_root).resolve()
        self.document = document.resolve() if document.is_absolute() else (self.root / document).resolve()
        folder = state_dir(self.root, "history")
        if folder is None:
            self.path = None
            self.problem = (f"{self.root / '.mtmc'} leads out of the workspace (a symlink); "
                            f"the step history of {self.document.name} is kept in memory only")
            self._steps = []
            return
        self.path = folder / self._file_name()
        self._steps = self._load()

    @property
    def persistent(self) -> bool:
        """Whether the steps are saved to disk (else they live as long as this object)."""
        return self.path is not None

    def _file_name(self) -> str:
        try:
            relative = self.document.relative_to(self.root).as_posix()
        except ValueError:  # a document outside the workspace (the CLI's --workspace elsewhere)
            relative = self.document.as_posix().lstrip("/")
        digest = hashlib.sha1(relative.encode()).hexdigest()[:8]
        readable = relative.replace("/", "__")[-80:]
        return f"{readable}.{digest}.json"

    # ---- storage --------------------------------------------------------------------------------
    def _load(self) -> list[StepRecord]:
        assert self.path is not None
        self._remove_stale_temporaries()
        if not self.path.exists() and not self.path.is_symlink():
            return []
        original = self.path
        try:
            if self.path.is_symlink():  # reading would follow it out of .mtmc/
                raise ValueError("a symlink")
            if self.path.stat().st_size > MAX_HISTORY_BYTES:
                raise ValueError(f"larger than {MAX_HISTORY_BYTES >> 20} MiB")
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("steps", []), list):
                raise ValueError(f"not a step history (a JSON {type(data).__name__})")
            return [StepRecord.from_json(s) for s in data.get("steps", [])]
        except Exception as exc:  # noqa: BLE001 - any damage (bad JSON, wrong shapes, 100k-deep nesting)
            # A damaged history is set aside, never silently overwritten, and the caller reports it.
            broken = self.path.with_name(f"{self.path.stem}.broken-{time.strftime('%Y%m%d-%H%M%S')}"
                                         f"-{uuid.uuid4().hex[:4]}.json")
            reason = f"{type(exc).__name__}: {exc}"[:200]
            try:
                self.path.replace(broken)
                where = f"moved to {broken.name}"
            except OSError as move_error:
                where = f"could not be moved aside ({move_error}); it is not overwritten"
                self.path = None  # keep the damaged file for the user: work in memory
            self.problem = f"the step history {original} was unreadable ({reason}); {where}"
            return []

    def _remove_stale_temporaries(self) -> None:
        """Half-written files of a writer that was killed before its rename (harmless, but they pile up)."""
        now = time.time()
        try:
            for tmp in self.path.parent.glob(f".tmp-{self.path.stem}-*"):
                if now - tmp.stat().st_mtime > STALE_TEMPORARY_S:
                    tmp.unlink()
        except OSError:
            pass

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"version": FORMAT_VERSION, "document": str(self.document), "steps": [s.to_json() for s in self._steps]}
        # Write-then-rename: a kill at any point leaves the old file or the new one, never half of one.
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".tmp-{self.path.stem}-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(data, handle, indent=1)
                handle.flush()
                os.fsync(handle.fileno())  # the data is on disk before the name points at it
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        _fsync_folder(self.path.parent)

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
