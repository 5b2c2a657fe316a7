"""Worker processes that run user code: one per GPU (or one CPU interpreter worker), started lazily.

The caller (the language server, the CLI, the search loop) never imports the user's file. A job
goes to a worker over a pipe; the worker answers with phase messages and a result. The pool
enforces the compile and run timeouts per phase, kills the worker's whole process group on a
timeout, a crash, a cancellation or a superseded job, and starts a fresh worker for the next job.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import json
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Union

from ..safe_exec import safe_python_argv
from .containment import Containment

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
STARTUP_TIMEOUT_S = 180.0
# How long a write waits for a worker to read its pipe (a job's text, a verdict): a live worker reads at
# once, between trials at the latest; one that stops reading is treated as crashed.
SEND_TIMEOUT_S = 30.0
LOG_TAIL_CHARS = 3000
PHASE_TEXT = {
    "compile": "importing and launching (compiles the kernels)",
    "correctness": "checking correctness over fresh inputs",
    "speed": "timing old and new, interleaved",
    "recheck": "speedup over the recheck threshold: more seeds and shapes",
}

# The worker loads the runtime package by path under a private name, so it works the same from an
# install, an editable checkout, or the uninstalled copy on the GPU machine.
_BOOT = """
import importlib.util, sys
folder = sys.argv[1]
spec = importlib.util.spec_from_file_location(
    "mtmc_verify_runtime", folder + "/__init__.py", submodule_search_locations=[folder])
module = importlib.util.module_from_spec(spec)
sys.modules["mtmc_verify_runtime"] = module
spec.loader.exec_module(module)
from mtmc_verify_runtime.worker import main
sys.exit(main(*map(int, sys.argv[2:])))
"""

Cancel = Union[Callable[[], bool], threading.Event, None]
Progress = Callable[[str, dict], None]


def _cancel_check(cancel: Cancel) -> Callable[[], bool]:
    if cancel is None:
        return lambda: False
    if hasattr(cancel, "is_set"):
        return cancel.is_set
    return cancel


@dataclass
class JobOutcome:
    """What came back from a worker: a result, or why there is none."""

    result: dict | None
    # None when ``result`` is set; else "timeout" | "crash" | "cancelled" | "superseded" | "start_failed".
    failure: str | None = None
    phase: str | None = None  # the phase the job was in when it failed
    detail: str = ""  # exit code / signal / timeout figure, in words
    log_tail: str = ""  # the worker's stdout+stderr tail (user prints, tracebacks, CUDA messages)
    worker: str = ""  # "cpu" or "cuda:0"
    seconds: float = 0.0
    events: list[dict] = field(default_factory=list)


class Worker:
    """One worker subprocess bound to one device (a GPU index, or None for the CPU interpreter).

    ``role`` "candidate" runs jobs (the new version's code); "checker" only judges an isolated job's
    trials (``runtime/checker.py``): it never receives the new version, and signs what it answers with a
    key it reads once from a pipe. Both run in the sandbox of ``containment`` (``containment.py``).
    """

    def __init__(self, gpu: str | None, role: str = "candidate", containment: Containment | None = None,
                 partner: "Worker | None" = None):
        self.gpu = gpu  # a CUDA_VISIBLE_DEVICES value (index or UUID), None for the CPU interpreter
        self.role = role
        self.name = ("cpu" if gpu is None else f"cuda:{gpu}") + (" checker" if role == "checker" else "")
        self._key = b""  # the checker's signing key, new for every process
        self.checker: Worker | None = None  # a candidate worker's partner for isolated jobs
        self.containment = containment or Containment("none")
        self.partner = partner  # a checker's candidate: the checker reads the outputs it writes
        self.contained = ""  # what the sandbox holds, as the worker reported it at start
        self.proc: subprocess.Popen | None = None
        self._job_w: int | None = None
        self._res_r: int | None = None
        self._buffer = b""
        self.log_path = Path(tempfile.mkstemp(prefix=f"mtmc-worker-{self._file_tag}-", suffix=".log")[1])
        self.jobs_run = 0
        self.ready = False  # its "ready" was read: a process spawned ahead of its job is not, until awaited
        self.spawned_once = False

    @property
    def _file_tag(self) -> str:
        return self.name.replace(":", "").replace(" ", "-")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, cancelled: Callable[[], bool]) -> str | None:
        """Start the process and wait for its "ready"; an error message on failure."""
        return self.spawn() or self.await_ready(cancelled)

    def spawn(self) -> str | None:
        """Start the process (not waiting for it); an error message on failure."""
        env = dict(os.environ)
        env.pop("MTMC_VERIFY_KEY", None)  # a variable every process of the user could read: never the key
        env.pop("MTMC_VERIFY_CONTAINMENT", None)
        env["MTMC_VERIFY_ROLE"] = self.role
        if self.gpu is None:
            env["TRITON_INTERPRET"] = "1"
            env["MTMC_VERIFY_MODE"] = "interpreter"
            env["CUDA_VISIBLE_DEVICES"] = ""
        else:
            env.pop("TRITON_INTERPRET", None)
            env["MTMC_VERIFY_MODE"] = "gpu"
            env["CUDA_VISIBLE_DEVICES"] = str(self.gpu)
        job_r, job_w = os.pipe()
        res_r, res_w = os.pipe()
        fds = [job_r, res_w]
        if self.role == "checker":
            # The signing key goes through a pipe the checker reads once and closes: never its environment or
            # command line, which /proc shows to other processes.
            self._key = os.urandom(32)
            key_r, key_w = os.pipe()
            os.write(key_w, self._key.hex().encode())
            os.close(key_w)
            fds.append(key_r)
        if not self.log_path.parent.is_dir():  # its temporary folder went away (a server's scratch space)
            self.log_path = Path(tempfile.mkstemp(prefix=f"mtmc-worker-{self._file_tag}-", suffix=".log")[1])
        log = open(self.log_path, "ab")  # O_APPEND: the pool may truncate it between jobs
        try:
            argv = [*safe_python_argv(), "-c", _BOOT, str(RUNTIME_DIR), *map(str, fds)]
            partner = self.partner._file_tag if self.partner is not None else None
            argv = self.containment.prepare(self._file_tag, self.role, partner, env, argv, fds)
            self.proc = subprocess.Popen(
                argv, pass_fds=fds, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=env, start_new_session=True,  # own process group: kill reaches its children too
            )
        except OSError as exc:
            for fd in (job_w, res_r, *fds):
                os.close(fd)
            return f"could not start a worker: {exc}"
        finally:
            log.close()
        for fd in fds:
            os.close(fd)
        os.set_blocking(job_w, False)  # ``send`` waits for room with a deadline
        self._job_w, self._res_r, self._buffer = job_w, res_r, b""
        self.ready, self.spawned_once = False, True
        return None

    def await_ready(self, cancelled: Callable[[], bool]) -> str | None:
        """Wait for a spawned process's "ready"; an error message on failure."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            msg, status = self._next_message(deadline, cancelled)
            if msg is not None and msg.get("event") == "ready":
                self.ready = True
                self.contained = str(msg.get("containment") or "none: not reported")
                return None
            if status is not None:
                self.kill()
                return f"worker did not start ({status}): {self.log_tail()}"

    def send(self, message: dict, timeout_s: float = SEND_TIMEOUT_S) -> str | None:
        """Write one JSON line to the worker's job pipe; an error message on failure.

        The pipe is non-blocking and each wait for room is bounded: a worker that stops reading (a
        candidate ignoring its verdicts once the pipe is full) fails the job instead of hanging the pool."""
        deadline = time.monotonic() + timeout_s
        try:
            payload = memoryview((json.dumps(message) + "\n").encode())
            while payload:  # a large file does not fit the pipe in one write
                try:
                    payload = payload[os.write(self._job_w, payload):]
                except BlockingIOError:
                    left = deadline - time.monotonic()
                    if left <= 0 or not select.select([], [self._job_w], [], left)[1]:
                        return f"the worker did not read its pipe for {timeout_s:.0f} s"
        except (OSError, TypeError) as exc:
            return str(exc)
        return None

    def truncate_log(self) -> None:
        try:
            os.truncate(self.log_path, 0)
        except OSError:
            pass

    def run(self, job: dict, compile_timeout_s: float, run_timeout_s: float,
            progress: Progress | None, cancelled: Callable[[], bool], relay: "_Relay | None" = None) -> JobOutcome:
        """Send one job and wait for its result under per-phase deadlines (``relay``: an isolated job's checker)."""
        started = time.monotonic()
        outcome = JobOutcome(result=None, worker=self.name)
        self.truncate_log()
        error = self.send(job)
        if error is not None:
            self.kill()
            outcome.failure, outcome.detail = "crash", f"could not send the job: {error}"
            return outcome
        self.jobs_run += 1
        phase = "compile"
        deadline = time.monotonic() + compile_timeout_s
        while True:
            msg, status = self._next_message(deadline, cancelled)
            if msg is not None:
                outcome.events.append(msg)
                event = msg.get("event")
                if event == "phase":
                    phase = msg["phase"]
                    limit = compile_timeout_s if phase == "compile" else run_timeout_s
                    deadline = time.monotonic() + limit
                    if progress:
                        progress(PHASE_TEXT.get(phase, phase), {"phase": phase})
                elif event == "progress" and progress:
                    progress(msg.get("message", ""), {"phase": phase})
                elif event == "judge" and relay is not None:
                    # The checker's time counts against the phase, as the reference's did in one process.
                    reply, failure = relay(msg.get("request") or {}, deadline, cancelled)
                    if failure is None and self.send(reply) is not None:
                        failure = ("crash", "the worker stopped reading its verdicts")
                    if failure is not None:
                        outcome.phase, outcome.seconds = phase, time.monotonic() - started
                        outcome.failure, outcome.detail = failure
                        self.kill()
                        outcome.log_tail = relay.log_tail() + self.log_tail()
                        return outcome
                elif event == "result":
                    outcome.result = msg["result"]
                    outcome.seconds = time.monotonic() - started
                    if not msg["result"].get("worker_healthy", True) or msg.get("recycle"):
                        outcome.log_tail = self.log_tail()
                        self.kill()
                    return outcome
                continue
            outcome.phase = phase
            outcome.seconds = time.monotonic() - started
            if status == "timeout":
                self._dump_stacks()
                limit = compile_timeout_s if phase == "compile" else run_timeout_s
                outcome.failure, outcome.detail = "timeout", f"no answer within {limit:g} s in the {phase} phase"
            elif status == "cancelled":
                outcome.failure, outcome.detail = "cancelled", "cancelled before it finished"
            else:
                outcome.failure, outcome.detail = "crash", status
            self.kill()
            outcome.log_tail = self.log_tail()
            return outcome

    def _next_message(self, deadline: float, cancelled: Callable[[], bool]) -> tuple[dict | None, str | None]:
        """The next JSON message, or (None, why): "timeout", "cancelled" or how the process ended."""
        while b"\n" not in self._buffer:
            if cancelled():
                return None, "cancelled"
            now = time.monotonic()
            if now >= deadline:
                return None, "timeout"
            ready, _, _ = select.select([self._res_r], [], [], min(0.1, deadline - now))
            if not ready:
                continue
            chunk = os.read(self._res_r, 1 << 20)
            if not chunk:
                return None, self._exit_description()
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            return None, f"garbled message from the worker: {line[:200]!r}"
        if self.role != "checker":
            return message, None
        # Another process of the user (the candidate's) can open our end of the pipe through /proc:
        # only lines signed with this checker's key are its own.
        body = message.get("body") if isinstance(message, dict) else None
        mac = hmac.new(self._key, str(body).encode(), hashlib.sha256).hexdigest()
        if not isinstance(body, str) or not hmac.compare_digest(mac, str(message.get("mac"))):
            return None, "a message on the checker's pipe that the checker did not sign"
        return json.loads(body), None

    def _exit_description(self) -> str:
        try:
            code = self.proc.wait(timeout=5) if self.proc else None
        except subprocess.TimeoutExpired:
            return "the worker closed its pipe but did not exit"
        if code is None:
            return "the worker is gone"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the worker died from {name}"
        return f"the worker exited with code {code}"

    def _dump_stacks(self) -> None:
        """Ask a hung worker for its Python stacks (faulthandler on SIGUSR1) before it is killed."""
        if self.proc is None or self.proc.poll() is not None:
            return
        before = self._log_size()
        try:
            os.kill(self.proc.pid, signal.SIGUSR1)
        except OSError:
            return
        # faulthandler writes from its signal handler; on a loaded machine that can take a moment.
        waited_until = time.monotonic() + 3.0
        while time.monotonic() < waited_until:
            time.sleep(0.1)
            size = self._log_size()
            if size > before:
                time.sleep(0.2)  # let the rest of the dump (all threads) land
                if self._log_size() == size:
                    return

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return ""

    def sweep(self) -> int:
        """Kill what the last job left running beside this worker (``containment.sweep``); how many."""
        if not self.alive:
            return 0
        return self.containment.sweep(self._file_tag, self.proc.pid, self.contained)

    def kill(self) -> None:
        """Kill the worker's process group (user code may have started children) and close the pipes.

        In a sandbox the group holds the namespace's init: its end kills every process left inside."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if self.contained.startswith("root without namespaces"):  # no namespace to end: its user's processes
                self.containment.sweep(self._file_tag, -1, self.contained)
        for fd in (self._job_w, self._res_r):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._job_w = self._res_r = None
        self.proc = None

    def close(self) -> None:
        self.kill()
        if self.checker is not None:
            self.checker.close()
        try:
            self.log_path.unlink()
        except OSError:
            pass


class _Relay:
    """Passes an isolated job's judge requests to the checker process and keeps every verdict it gives.

    The candidate's process builds the job's result, but its correctness comes from these verdicts
    (``judged_result``): what the candidate says about its own trials is not believed.
    """

    def __init__(self, checker: Worker, job: dict, transfer: list[Path] | None = None):
        self.checker = checker
        # The checker's copy of the job: never the new version's text.
        self.job = {k: v for k, v in job.items() if k != "new_text"}
        self.transfer = [str(p) for p in transfer or []]  # in a sandbox: where the candidate's outputs must be
        self.opened = False
        self.verdicts: dict[str, dict] = {}  # judge id -> {"request", "trial"}
        self.self_judged: str | None = None

    def __call__(self, request: dict, deadline: float, cancelled: Callable[[], bool]) -> tuple[dict | None, tuple | None]:
        rid = uuid.uuid4().hex
        outputs = os.path.normpath(str(request.get("outputs", "")))
        if self.transfer and not any(outputs.startswith(folder + os.sep) for folder in self.transfer):
            # The checker reads only files the candidate wrote for it, never one the candidate points elsewhere.
            trial = {"ok": False, "checks": {}, "error": {"stage": "run", "type": "UnreadableOutputs", "line": None,
                                                          "message": "outputs outside the candidate's transfer folder"}}
            self.verdicts[rid] = {"request": request, "trial": trial}
            return {"trial": trial, "findings": {}, "judge_id": rid}, None
        message = {"rid": rid, "request": request}
        if not self.opened:
            message["job"] = self.job
        if self.checker.send(message) is not None:
            self.checker.kill()
            return None, ("crash", "the checker process is gone")
        self.opened = True
        while True:
            msg, status = self.checker._next_message(deadline, cancelled)
            if msg is None:
                if status == "cancelled":
                    # The checker runs only accepted code: it stays (a superseded job is the common case),
                    # and the next job skips this request's late verdict by its id.
                    return None, ("cancelled", "cancelled before it finished")
                if status == "timeout":
                    self.checker._dump_stacks()
                self.checker.kill()
                if status == "timeout":
                    return None, ("timeout", "the checker (reference and previous version) did not answer in time")
                return None, ("crash", f"the checker process failed: {status}")
            if msg.get("event") == "verdict" and msg.get("rid") == rid:
                break
        if "self_judged" in msg:
            self.self_judged = msg["self_judged"]
            return {"self_judged": msg["self_judged"]}, None
        trial = msg.get("trial") or {"ok": False}
        error = trial.get("error") or {}
        if error.get("type") == "CheckerError":  # the verifier failed, not the candidate: no verdict
            self.checker.kill()  # it exited after answering: the next job starts a fresh one
            return None, ("crash", f"{error.get('message')}\n{error.get('traceback', '')}".strip())
        self.verdicts[rid] = {"request": request, "trial": trial}
        return {"trial": trial, "findings": msg.get("findings") or {}, "judge_id": rid}, None

    def log_tail(self) -> str:
        tail = self.checker.log_tail()
        return f"[checker]\n{tail}\n[candidate]\n" if tail else ""


def judged_result(result: dict, relay: _Relay, job: dict) -> dict:
    """The candidate's result with correctness as the checker judged it.

    Each trial's checks come from the verdict it names (each verdict used once); a trial that names
    none fails unless it already failed by its own account; a failing verdict the candidate left out
    of its result is added back; and when everything passed, every seed (every test per seed) must
    have been judged. Speed, compile and launch figures stay the candidate's (timing runs there).
    A candidate's process caught claiming more than the checker said is marked ``candidate_misreported``:
    its code changed the worker's, and the pool replaces that worker.
    """
    runtime = result.setdefault("runtime", {})
    if relay.self_judged is not None:
        runtime["isolation"] = f"none: {relay.self_judged}"
        return result
    if "internal_error" in result:
        return result
    used: set[str] = set()
    misreported = False

    def settle(trial: dict) -> None:
        nonlocal misreported
        if trial.get("skipped"):
            return
        claimed = bool(trial.get("ok"))
        verdict_id = trial.get("judge_id")
        verdict = relay.verdicts.get(verdict_id) if verdict_id not in used else None
        for key in ("checks", "nonfinite", "mutated", "expected_errors", "expected_reused"):
            trial.pop(key, None)
        if verdict is None:
            trial["checks"] = {}
            if not trial.get("error"):
                trial.update(ok=False, error={"stage": "run", "type": "NotJudged", "line": None,
                                              "message": "this trial's outputs never reached the checker"})
            trial["ok"] = False
            misreported = misreported or claimed
            return
        used.add(verdict_id)
        trial.update(verdict["trial"], seed=verdict["request"].get("seed"))
        trial["ok"] = bool(verdict["trial"].get("ok")) and not trial.get("error")
        misreported = misreported or (claimed and not trial["ok"])

    trials = result.setdefault("trials", [])
    recheck = result.get("recheck") or {}
    for trial in trials + list(recheck.get("trials") or []):
        settle(trial)
    for verdict_id, verdict in relay.verdicts.items():
        if verdict_id not in used and not verdict["trial"].get("ok"):
            misreported = True
            trials.append({**verdict["trial"], "seed": verdict["request"].get("seed"),
                           "kind": verdict["request"].get("kind"), "test": verdict["request"].get("test"),
                           "ok": False})
    compiled = (result.get("compile", {}).get("new") or {}).get("ok")
    if compiled and trials and all(t.get("ok") or t.get("skipped") for t in trials):
        tests = job["harness"].get("tests") if job["harness"].get("style") == "test" else [None]
        judged = {(v["request"].get("seed"), v["request"].get("test")) for v in relay.verdicts.values()
                  if v["request"].get("kind") in ("fresh", "test")}
        missing = [(seed, test) for seed in job["seeds"] for test in tests or [None] if (seed, test) not in judged]
        if missing:
            misreported = True
            seed, test = missing[0]
            trials.append({"seed": seed, "kind": "fresh", "test": test, "ok": False, "checks": {}, "error": {
                "stage": "run", "type": "NotJudged", "line": None,
                "message": f"{len(missing)} trial(s) were never judged by the checker (first: seed {seed}"
                           + (f", {test}" if test else "") + ")"}})
    runtime["isolation"] = "checker process"
    if misreported:
        runtime["candidate_misreported"] = True
    return result


def detect_gpus() -> list[str]:
    """The GPUs a worker may be pinned to, as CUDA_VISIBLE_DEVICES values; [] without any.

    Honours the caller's CUDA_VISIBLE_DEVICES ("2,3" -> ["2", "3"], "" -> none); otherwise counts
    ``nvidia-smi -L`` lines, or the /dev/nvidiaN nodes where nvidia-smi is missing.
    """
    import shutil

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if not ids or ids[0] == "-1":
            return []
    smi = shutil.which("nvidia-smi")
    count = 0
    if smi is not None:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10)
            count = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
        except (OSError, subprocess.TimeoutExpired):
            count = 0
    if count == 0:  # no nvidia-smi in a container: count the device nodes
        count = sum(1 for p in Path("/dev").glob("nvidia[0-9]*") if p.name[6:].isdigit())
    if count == 0:
        return []
    if visible is not None:
        return ids[:count]
    return [str(i) for i in range(count)]


class _Token:
    def __init__(self):
        self.event = threading.Event()
        self.reason = "cancelled"


class WorkerPool:
    """Holds the workers; ``run`` blocks until a worker is free, then runs one job on it.

    Thread-safe: the language server may call ``run`` from several threads. Jobs submitted with
    the same ``key`` (e.g. a document URI) supersede each other: the older one is cancelled.
    """

    def __init__(self, mode: str = "auto", gpus: list[str] | None = None):
        if mode not in ("auto", "gpu", "interpreter"):
            raise ValueError(f"mode must be auto, gpu or interpreter, not {mode!r}")
        if mode == "interpreter":
            gpus = []
        elif gpus is None:
            gpus = detect_gpus()
        if mode == "gpu" and not gpus:
            raise RuntimeError("mode 'gpu' asked for, but no NVIDIA GPU is visible")
        self.mode = "gpu" if gpus else "interpreter"
        self.containment = Containment()
        self._workers = [Worker(g, containment=self.containment) for g in (map(str, gpus) if gpus else [None])]
        for worker in self._workers:  # an isolated job's expected outputs and comparisons run there
            worker.checker = Worker(worker.gpu, role="checker", containment=self.containment, partner=worker)
        self._idle: queue.Queue[Worker] = queue.Queue()
        for w in self._workers:
            self._idle.put(w)
        self._lock = threading.Lock()
        self._by_key: dict[str, _Token] = {}
        self._closed = False
        atexit.register(self.close)

    @property
    def size(self) -> int:
        return len(self._workers)

    @property
    def devices(self) -> list[str]:
        return [w.name for w in self._workers]

    def cancel(self, key: str, reason: str = "cancelled") -> bool:
        """Cancel the running or waiting job submitted under ``key``; True if there was one."""
        with self._lock:
            token = self._by_key.get(key)
        if token is None:
            return False
        token.reason = reason
        token.event.set()
        return True

    def run(self, job: dict, compile_timeout_s: float = 120.0, run_timeout_s: float = 60.0,
            progress: Progress | None = None, cancel: Cancel = None, key: str | None = None) -> JobOutcome:
        """Run ``job`` on the next free worker (starting it if needed) and return its outcome."""
        if self._closed:
            raise RuntimeError("the worker pool is closed")
        token = _Token()
        if key is not None:
            with self._lock:
                previous = self._by_key.get(key)
                self._by_key[key] = token
            if previous is not None:
                previous.reason = "superseded"
                previous.event.set()
        user_cancelled = _cancel_check(cancel)

        def cancelled() -> bool:
            if user_cancelled():
                token.reason = "cancelled"
                return True
            return token.event.is_set()

        try:
            worker = self._acquire(cancelled)
            if worker is None:
                return JobOutcome(result=None, failure=token.reason, detail="cancelled while waiting for a worker")
            try:
                # With a previous version or a problem file to judge by, the candidate runs isolated: its
                # outputs are judged in the checker process, which never runs the candidate's code.
                isolated = job.get("old_text") is not None or job.get("problem_text") is not None
                used = [worker, worker.checker] if isolated else [worker]
                needed = [w for w in used if not w.alive or not w.ready]
                if needed:
                    if progress:
                        progress(f"starting a verification worker on {worker.name}", {"phase": "start"})
                    # Both start at once; one spawned ahead (after its predecessor was killed) is only awaited.
                    error = next((e for e in (w.spawn() for w in needed if not w.alive) if e), None)
                    for w in needed:
                        error = error or w.await_ready(cancelled)
                    if error is not None:
                        for w in needed:
                            w.kill()
                        failure = token.reason if cancelled() else "start_failed"
                        return JobOutcome(result=None, failure=failure, detail=error, worker=worker.name)
                relay = None
                if isolated:
                    job = {**job, "side": "candidate"}
                    transfer = self.containment.transfer_folders(worker._file_tag) if worker.contained[:4] != "none" else []
                    relay = _Relay(worker.checker, job, transfer)
                    worker.checker.truncate_log()
                outcome = worker.run(job, compile_timeout_s, run_timeout_s, progress, cancelled, relay)
                # Every process the job started ends with it: daemons too (in a sandbox, all of them).
                killed = sum(w.sweep() for w in used)
                if outcome.result is not None:
                    runtime = outcome.result.setdefault("runtime", {})
                    runtime["containment"] = {w.role: w.contained for w in used}
                    if killed:
                        runtime["processes_killed"] = killed
                if outcome.failure == "cancelled":
                    outcome.failure = token.reason
                if relay is None and outcome.result is not None:
                    outcome.result.setdefault("runtime", {}).setdefault(
                        "isolation", "none: no previous version or problem file to judge it by")
                if relay is not None and outcome.result is not None:
                    outcome.result = judged_result(outcome.result, relay, job)
                    if outcome.result.get("runtime", {}).get("candidate_misreported"):
                        worker.kill()  # its verifier code was changed: a fresh worker for the next job
                return outcome
            finally:
                self._start_ahead(worker)
                self._idle.put(worker)
        finally:
            if key is not None:
                with self._lock:
                    if self._by_key.get(key) is token:
                        del self._by_key[key]

    def _start_ahead(self, worker: Worker) -> None:
        """Spawn again, without waiting, a worker (or its checker) that a job killed: cancelled, timed out or
        recycled. Its successor then boots (imports torch, starts CUDA, 3-5 s on the H200) while the caller
        prepares the next step, not when that step is already waiting for it."""
        if self._closed:
            return
        for w in (worker, worker.checker):
            if w is not None and w.spawned_once and not w.alive:
                w.spawn()

    def _acquire(self, cancelled: Callable[[], bool]) -> Worker | None:
        while True:
            if cancelled():
                return None
            try:
                return self._idle.get(timeout=0.1)
            except queue.Empty:
                continue

    def close(self) -> None:
        """Kill every worker; the pool cannot be used afterwards."""
        self._closed = True
        for w in self._workers:
            w.close()
        self.containment.close()


_default_pool: WorkerPool | None = None
_default_lock = threading.Lock()


def default_pool() -> WorkerPool:
    """The process-wide pool used when a caller passes none (started lazily, on first job)."""
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            _default_pool = WorkerPool()
        return _default_pool
