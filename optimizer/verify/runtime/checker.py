"""The checker process of an isolated job: computes the expected outputs and compares, never runs the candidate.

The candidate's process sends, per trial, the file holding its outputs (and its inputs after the
call); this process regenerates the trial's inputs from the accepted version or the problem file,
runs the reference and the previous version on them, and compares with the tolerance rules of
``compare.py``. The new version's text is never sent here, so no code of the candidate's runs in
this process, and the candidate's outputs are read with ``torch.load(weights_only=True)``, which
builds tensors and plain containers only. Verdicts go to the pool signed with a key only the pool
and this process know (another process of the same user can open our pipes through /proc).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
from typing import IO, Any, Callable

import torch

from .job import FatalDeviceError, Job, _digest, alternate_shapes, portable
from .versions import UserCodeError, describe_exception, to_device

Emit = Callable[[dict], None]


class CheckerSession(Job):
    """The checker's half of one job: the previous version and the problem file loaded, the reference built."""

    def __init__(self, job: dict, emit: Emit):
        super().__init__({**job, "side": "checker"}, emit)
        self.cannot_judge: str | None = None  # why the candidate must judge itself (then nothing is judged here)
        self.allowed_kwargs: list[dict] = []
        self.make_inputs = None
        self.floor_known = False

    def open(self) -> None:
        """Load what judges the candidate: the problem file and the previous version, never the new one."""
        old = None
        for role in ("old", "problem"):
            text = self.job.get(f"{role}_text")
            if text is None:
                continue
            try:
                version = self._load_kept(role, text)
            except UserCodeError as err:
                self.result["compile"][role] = {"ok": False, "stage": "import", **err.info}
                continue
            self.versions[role] = version
            old = version if role == "old" else old
        h = self.harness
        if h["style"] == "test":
            if old is None:
                self.cannot_judge = "no previous version to run the tests against"
            return
        gen, inputs_from = self._pick(h.get("inputs", "get_inputs"), None, old)
        if gen is None:
            self.cannot_judge = "the inputs come only from the candidate's own file"
            return
        kwargs = self._input_kwargs(gen)
        self.result["runtime"].update(inputs_from=inputs_from, input_kwargs=kwargs)
        try:
            self.impls = self._build_impls(None, old)
        except UserCodeError as err:
            self.cannot_judge = f"the reference does not build here ({err.info['message'][:200]})"
            return
        if self.impls.get("reference") is None and self.impls.get("old") is None:
            self.cannot_judge = "no reference and no previous version outside the candidate's file"
            return
        self.make_inputs = self._input_maker(gen)
        self.allowed_kwargs = [kwargs] + alternate_shapes(kwargs, gen)
        self.expected_key = _digest(self.job.get("old_text"), self.job.get("problem_text"), h, "")

    def verdict_on(self, request: dict) -> dict:
        """The verdict on one trial: ``{"trial": {...}, "findings": {...}}``, or ``{"self_judged": why}``."""
        if self.cannot_judge is not None:
            return {"self_judged": self.cannot_judge}
        trial: dict[str, Any] = {"ok": True, "checks": {}}
        try:
            sent = torch.load(request["outputs"], weights_only=True, map_location="cpu")
            got, args = to_device(sent["got"], self.device), to_device(sent["args"], self.device)
        except Exception as exc:  # noqa: BLE001 - whatever the file holds, it is the candidate's failure
            trial.update(ok=False, error={"stage": "run", "type": "UnreadableOutputs", "line": None,
                                          "message": f"the candidate's outputs could not be read: {exc}"[:500]})
            return {"trial": trial}
        seed = int(request["seed"])
        if "test" in request:
            self._judge_test(trial, str(request["test"]), self.versions.get("old"), seed, got,
                             record=not self.floor_known)
            self.floor_known = True
        else:
            kwargs = self._allowed(request.get("kwargs"))
            if kwargs is None:
                trial.update(ok=False, error={"stage": "run", "type": "Inputs", "line": None,
                                              "message": "the candidate ran on inputs the checker did not choose"})
                return {"trial": trial}
            try:
                fresh = self.make_inputs(seed, kwargs)
            except UserCodeError as err:
                trial.update(ok=False, error={"stage": "get_inputs", **err.info})
                return {"trial": trial}
            first = not self.floor_known
            pristine = to_device(portable(fresh), self.device)  # what the candidate's file would hold unchanged
            self._judge_trial(trial, self.impls, fresh, args, got, seed, str(request.get("kind")), kwargs, first,
                              pristine)
            self.floor_known = True
        findings = {"precision": self.result["runtime"].get("precision")}
        if not self.result["compile"].get("old", {}).get("ok", True):
            findings["old_error"] = {k: v for k, v in self.result["compile"]["old"].items() if k not in ("ok", "stage")}
        if self.result["runtime"].get("reference_error"):
            findings["reference_error"] = self.result["runtime"]["reference_error"]
        return {"trial": trial, "findings": findings}

    def _allowed(self, kwargs: Any) -> dict | None:
        """The checker's own keyword arguments for get_inputs that equal the ones the candidate says it used."""
        said = json.dumps(kwargs, sort_keys=True, default=str)
        return next((k for k in self.allowed_kwargs if json.dumps(k, sort_keys=True, default=str) == said), None)

    def close(self) -> None:
        for role, version in self.versions.items():
            if role not in self.kept:
                version.unload()
        shutil.rmtree(self.folder, ignore_errors=True)


def signer(key: bytes, stream: IO[str]) -> Emit:
    """Writes each message as ``{"mac", "body"}``: the pool drops lines it did not get from this process."""

    def emit(message: dict) -> None:
        body = json.dumps(message, default=repr)
        mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        stream.write(json.dumps({"mac": mac, "body": body}) + "\n")
        stream.flush()

    return emit


def forbid_inspection() -> None:
    """Make this process non-dumpable: other processes of the user can no longer open its /proc files
    (memory, file descriptors) or attach a debugger; the candidate's process is one of them."""
    try:
        import ctypes

        PR_SET_DUMPABLE = 4
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the signature on every verdict still holds
        pass


def serve(jobs: IO[str], emit: Emit) -> int:
    """Answer judge requests until the pool closes the pipe; a new job id opens a new session."""
    session: CheckerSession | None = None
    while True:
        line = jobs.readline()
        if not line:
            return 0
        if not line.strip():
            continue
        message = json.loads(line)
        healthy = True
        try:
            if "job" in message:
                if session is not None:
                    session.close()
                session = CheckerSession(message["job"], emit)
                session.open()
            if session is None:
                reply: dict = {"trial": {"ok": False, "checks": {}, "error": {
                    "stage": "run", "type": "CheckerError", "line": None, "message": "no job opened in the checker"}}}
            else:
                reply = session.verdict_on(message["request"])
        except FatalDeviceError as exc:
            healthy = False
            reply = {"trial": {"ok": False, "checks": {}, "error": {
                "stage": "run", "type": "CheckerError", "line": None, "message": f"the checker failed: {exc}"}}}
        except BaseException as exc:  # noqa: BLE001 - the checker must answer, whatever happened
            healthy = False
            info = describe_exception(exc, None)
            reply = {"trial": {"ok": False, "checks": {}, "error": {
                "stage": "run", "type": "CheckerError", "line": None,
                "message": f"internal error in the checker: {info['message']}", "traceback": info["traceback"]}}}
        emit({"event": "verdict", "rid": message.get("rid"), **reply})
        if not healthy:
            return 3  # the pool starts a fresh checker for the next request
        if os.environ.get("MTMC_VERIFY_MODE") == "gpu":
            torch.cuda.empty_cache()
