"""Opt-in recording of optimization episodes as JSONL, the training data of the policy.

One file per episode under ``<workspace>/.mtmc/trajectories/``: a ``begin`` line (file, kernel,
target, policy, GPU, library versions), one ``step`` line per attempt (state summary, action and
parameters, compile/correct/speedup, reward, timings), and an ``end`` line (the kept steps and
how the search stopped). docs/policy.md describes the fields.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import time
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

SCHEMA = "mtmc.trajectory.v1"
LIBRARIES = ("mtmc-lsp", "triton", "torch", "llama-cpp-python", "numpy")


def library_versions() -> dict[str, str | None]:
    """Installed versions, read from package metadata (nothing is imported)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def gpu_description() -> str:
    """The local GPU's name, or a statement that there is none (interpreter verification)."""
    from .hardware import local_gpu_name

    return local_gpu_name() or "none (CPU: Triton interpreter)"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class TrajectoryRecorder:
    """Writes one episode per ``begin``/``end`` pair; does nothing when ``enabled`` is False.

    ``evaluation`` marks the episodes of a run on evaluation data (KernelBench's evaluation half, held-out
    files): recorded like any other, never made into training decisions.
    """

    evaluation = False

    def __init__(self, workspace: str | Path, enabled: bool = True):
        from .history import state_dir

        folder = state_dir(workspace, "trajectories")
        # Set when nothing is recorded because .mtmc/ leads out of the workspace (a symlink).
        self.problem: str | None = None
        if folder is None and enabled:
            self.problem = f"{Path(workspace) / '.mtmc'} leads out of the workspace (a symlink): no trajectory recorded"
            logging.getLogger(__name__).warning("%s", self.problem)
        self.folder = folder or Path(workspace) / ".mtmc" / "trajectories"
        self.enabled = enabled and folder is not None
        self.path: Path | None = None
        self.episode: str | None = None
        self._step = 0

    def _write(self, record: dict[str, Any]) -> None:
        if not self.enabled or self.path is None:
            return
        record = {"schema": SCHEMA, "episode": self.episode, "time": round(time.time(), 3), **record}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, default=str) + "\n")

    def begin(self, *, path: str | None, kernel: str, target, policy: str, text: str, steps: int, beam: int,
              budget_s: float) -> None:
        if not self.enabled:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        self.episode = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:8]
        self.path = self.folder / f"{self.episode}.jsonl"
        self._step = 0
        self._write({
            "type": "begin", "file": path, "kernel": kernel, "target": getattr(target, "key", str(target)),
            "targetSummary": target.summary() if hasattr(target, "summary") else str(target),
            "policy": policy, "steps": steps, "beam": beam, "budgetS": budget_s,
            "textSha": _sha(text), "text": text, "gpu": gpu_description(), "libraries": library_versions(),
            **({"evaluation": True} if self.evaluation else {}),
        })

    def step(self, state, attempt) -> None:
        """One attempt: the state it started from, the action, what verification found, the reward."""
        if not self.enabled:
            return
        self._step += 1
        report = attempt.report or {}
        self._write({
            "type": "step", "index": self._step, "depth": attempt.depth,
            "state": state.summary(), "stateTextSha": _sha(attempt.parent_text),
            "action": attempt.candidate.action, "kind": attempt.candidate.kind, "params": attempt.candidate.params,
            "candidate": attempt.candidate.to_json(), "policyRank": attempt.rank, "policyScore": attempt.score,
            "policyLogprob": attempt.logprob, "status": attempt.status, "reason": attempt.reason,
            "compiled": attempt.compiled, "correct": attempt.correct, "speedup": attempt.speedup,
            "withinNoise": attempt.within_noise, "reward": attempt.reward,
            "rewardTerms": report.get("reward"), "verificationMode": report.get("mode"),
            "device": report.get("device"), "timings": attempt.timings, "diff": attempt.diff,
        })

    def end(self, result) -> None:
        if not self.enabled:
            return
        self._write({
            "type": "end", "stopped": result.stopped, "keptSteps": [s.candidate.to_json() for s in result.steps],
            "speedMeasured": result.speed_measured, "finalTextSha": _sha(result.final_text),
            "finalText": result.final_text, "elapsedS": round(result.elapsed_s, 3), "notes": result.notes,
        })


def read_episodes(workspace: str | Path) -> list[list[dict[str, Any]]]:
    """Every recorded episode, each as its list of records in order."""
    folder = Path(workspace) / ".mtmc" / "trajectories"
    episodes = []
    for file in sorted(folder.glob("*.jsonl")):
        with file.open(encoding="utf-8") as fh:
            episodes.append([json.loads(line) for line in fh if line.strip()])
    return episodes
