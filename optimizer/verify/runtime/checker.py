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
import time
from dataclasses import dataclass
from typing import IO, Any, Callable

import torch

from . import compare as cmp
from .job import FatalDeviceError, Job, alternate_shapes, expectation_key, portable
from .launches import autotune_choices
from .lru import ByteBoundedLRU
from .versions import UserCodeError, describe_exception, to_device

Emit = Callable[[dict], None]

# Kept between jobs (the optimize loop judges many candidates against one previous version): per
# (expectation key, seed, sizes) the inputs this process made and the reference's and the previous
# version's outputs on them, so a later candidate's trial costs a load and a comparison. The key holds
# the previous version's and the problem file's text: a changed previous version never finds them.
# Kept live, not sealed as in the candidate's process: no code of the candidate's runs here, and the
# process is not readable from outside (``forbid_inspection``). Bounded; a fresh checker starts empty.
KEPT_JUDGING_BYTES = {"cuda": 2 << 30, "cpu": 256 << 20}  # on a GPU at most 2% of its memory
# Device memory this process may hold unused between trials (the candidate's process shares the GPU).
IDLE_DEVICE_BYTES = 1 << 30


_UNKNOWN = object()  # a kept test result whose job's precision floor was not worked out with it


@dataclass
class _Judging:
    inputs: Any  # None for a test's result (a test makes its own inputs)
    expected: dict[str, Any]
    floor: Any = _UNKNOWN  # tests: the precision floor the first test's launches gave


_kept_judging = ByteBoundedLRU()  # of _Judging


def _keep_judging(key: tuple, inputs: Any, expected: dict[str, Any], device: str, floor: Any = _UNKNOWN) -> None:
    """Keep one seed's inputs and expected outputs for later candidates, oldest dropped past the budget."""
    size = cmp.nbytes(inputs) + sum(cmp.nbytes(value) for value in expected.values())
    budget = KEPT_JUDGING_BYTES.get(device, 0)
    if device == "cuda":  # a small GPU keeps less: the candidate's process needs the memory more
        budget = min(budget, torch.cuda.get_device_properties(0).total_memory // 50)
    _kept_judging.keep(key, _Judging(inputs, dict(expected), floor), size, budget)


class CheckerSession(Job):
    """The checker's half of one job: the previous version and the problem file loaded, the reference built."""

    def __init__(self, job: dict, emit: Emit):
        super().__init__({**job, "side": "checker"}, emit)
        self.cannot_judge: str | None = None  # why the candidate must judge itself (then nothing is judged here)
        self.allowed_kwargs: list[dict] = []
        self.make_inputs = None
        self.floor_known = False
        self.open_s: float | None = None  # how long ``open`` took, reported with the first verdict
        self.timings: dict[str, float] = {}  # the current verdict's

    def open(self) -> None:
        """Load what judges the candidate: the problem file and the previous version, never the new one."""
        started = time.perf_counter()
        try:
            self._open()
        finally:
            self.open_s = time.perf_counter() - started

    def _open(self) -> None:
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
        self.expected_key = expectation_key(self.job, "")

    def verdict_on(self, request: dict) -> dict:
        """The verdict on one trial: ``{"trial": {...}, "findings": {...}}``, or ``{"self_judged": why}``."""
        if self.cannot_judge is not None:
            return {"self_judged": self.cannot_judge}
        trial: dict[str, Any] = {"ok": True, "checks": {}}
        timings: dict[str, float] = {}
        self.timings = timings
        if self.open_s is not None:
            timings["open"], self.open_s = self.open_s, None
        mark = time.perf_counter()
        try:
            # On a GPU the tensors are copied to the device at once: read them straight from the file's pages.
            sent = torch.load(request["outputs"], weights_only=True, map_location="cpu", mmap=self.device != "cpu")
            got, args = to_device(sent["got"], self.device), to_device(sent["args"], self.device)
        except Exception as exc:  # noqa: BLE001 - whatever the file holds, it is the candidate's failure
            trial.update(ok=False, error={"stage": "run", "type": "UnreadableOutputs", "line": None,
                                          "message": f"the candidate's outputs could not be read: {exc}"[:500]})
            return {"trial": trial}
        mark = self._lap(timings, "load", mark)
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
            first = not self.floor_known
            key = (self.expected_key, seed, json.dumps(kwargs, sort_keys=True, default=str))
            kept = _kept_judging.get(key) if self.reuse else None
            if kept is not None and set(kept.expected) == self._judging_roles():
                _kept_judging.touch(key)
                fresh, expected = kept.inputs, dict(kept.expected)
                trial["expected_reused"] = sorted(expected)
                timings["reused"] = 1
            else:
                try:
                    fresh = self.make_inputs(seed, kwargs)
                except UserCodeError as err:
                    trial.update(ok=False, error={"stage": "get_inputs", **err.info})
                    return {"trial": trial}
                mark = self._lap(timings, "inputs", mark)
                expected = self._expected_outputs(trial, self.impls, fresh, seed, str(request.get("kind")), kwargs,
                                                  first, sealed_kept=False)
                mark = self._lap(timings, "expected", mark)
                if self.reuse and not trial.get("expected_errors") and set(expected) == self._judging_roles():
                    _keep_judging(key, fresh, expected, self.device)
            # What the candidate's file would hold had it left its inputs alone: the same containers around
            # the same tensors (no copy: nothing writes to them).
            pristine = portable(fresh, host_copy=False)
            self._compare_trial(trial, fresh, args, got, expected, first, pristine, kind=str(request.get("kind")))
            self.floor_known = True
        self._lap(timings, "compare" if "test" not in request else "test", mark)
        findings = {"precision": self.result["runtime"].get("precision"), "timings": timings}
        old = self.versions.get("old")
        if request.get("first") and self.mode == "gpu" and old is not None:
            # What the previous version's autotuned kernels chose here, while the candidate's process waited
            # idle for this verdict: its timing launches those configs instead of benchmarking them again.
            choices = autotune_choices(old.module)
            if choices:
                findings["autotuned"] = choices
        if not self.result["compile"].get("old", {}).get("ok", True):
            findings["old_error"] = {k: v for k, v in self.result["compile"]["old"].items() if k not in ("ok", "stage")}
        if self.result["runtime"].get("reference_error"):
            findings["reference_error"] = self.result["runtime"]["reference_error"]
        return {"trial": trial, "findings": findings}

    def _judge_test(self, trial: dict, name: str, old: Any, seed: int, got: Any, record: bool) -> None:
        """As in one process, with the previous version's result of each test and seed kept for later candidates
        (and, for the job's first test, the precision floor its launches gave)."""
        key = (self.expected_key, "test", name, seed)
        kept = _kept_judging.get(key) if self.reuse else None
        if kept is not None and (kept.floor is not _UNKNOWN or not record):
            _kept_judging.touch(key)
            expected = kept.expected["old"]
            if record:
                self.floor = kept.floor
                self.result["runtime"]["precision"] = str(self.floor).replace("torch.", "") if self.floor else None
            trial["expected_reused"] = ["old"]
            self.timings["reused"] = 1
        else:
            expected = self._expected_test(trial, name, old, seed, record)
            if self.reuse and expected is not None and not trial.get("expected_errors"):
                _keep_judging(key, None, {"old": expected}, self.device, self.floor if record else _UNKNOWN)
        self._compare_test(trial, got, expected)

    def _judging_roles(self) -> set[str]:
        return {role for role in ("reference", "old") if self.impls.get(role) is not None}

    @staticmethod
    def _lap(timings: dict[str, float], name: str, since: float) -> float:
        now = time.perf_counter()
        timings[name] = round(timings.get(name, 0.0) + now - since, 5)
        return now

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
        if os.environ.get("MTMC_VERIFY_MODE") == "gpu" and (
                torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > IDLE_DEVICE_BYTES):
            torch.cuda.empty_cache()  # only past a bound: freeing and allocating again each trial costs time
