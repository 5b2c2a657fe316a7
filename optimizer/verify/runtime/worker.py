"""The worker process: reads jobs (JSON lines) from one pipe, answers on another, until EOF.

User code may print anything: stdout and stderr go to a log file that the pool reads after a
crash; the protocol uses two dedicated pipe descriptors passed on the command line (a checker gets a
third, its signing key, read once and closed).
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import signal
import sys


def _exit_with_parent(parent: int) -> None:
    """A crashed editor must not leave a worker (or its spinning kernel) behind: watch the parent."""
    import threading
    import time

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="mtmc-parent-watch", daemon=True).start()


def _read_key(key_fd: int) -> bytes:
    """The checker's signing key, from the pipe the pool wrote it to (closed after: nothing else can read it)."""
    text = b""
    while chunk := os.read(key_fd, 128):
        text += chunk
    os.close(key_fd)
    return bytes.fromhex(text.decode())


def _reap_children() -> None:
    """Collect the exit of children an earlier job forked (the pool killed what it left): no zombies pile up."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(job_fd: int, result_fd: int, key_fd: int = -1) -> int:
    # TRITON_INTERPRET (CPU) or CUDA_VISIBLE_DEVICES (GPU) were set by the pool before we started.
    # A segfault or abort in user code then leaves a Python traceback (with the user's line) in the log.
    faulthandler.enable()
    # The pool sends SIGUSR1 before killing a job that timed out: the dump shows where it hung.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    _exit_with_parent(os.getppid())
    key = _read_key(key_fd) if key_fd >= 0 else b""  # before any other code runs in this process
    containment = os.environ.pop("MTMC_VERIFY_CONTAINMENT", "none: started without the pool's sandbox")
    import torch  # imported once, before any job, so jobs measure only their own work
    import triton  # noqa: F401 - likewise (every job's environment() needs it; about 0.2 s on a CPU)

    from . import job as _job_module  # noqa: F401 - the runtime's own modules, loaded before any user code

    jobs = os.fdopen(job_fd, "r", encoding="utf-8")
    results = os.fdopen(result_fd, "w", encoding="utf-8")
    mode = os.environ.get("MTMC_VERIFY_MODE", "interpreter")
    if mode == "gpu":
        torch.cuda.init()
        # What a job's first reference call would otherwise start: the cuBLAS handle, and (in the candidate) the
        # FLOP counter's module. A worker spawned ahead of its job (pool._start_ahead) does this off the clock;
        # the H200 suite's first verification per worker spent 5 s in its FLOP count (session 10, not yet
        # measured with this).
        torch.cuda.current_blas_handle()
        if os.environ.get("MTMC_VERIFY_ROLE") != "checker":
            import torch.utils.flop_counter  # noqa: F401

    if os.environ.get("MTMC_VERIFY_ROLE") == "checker":
        from . import checker

        gc.freeze()  # what start-up loaded lives as long as the process: collections need not walk it
        checker.forbid_inspection()
        emit = checker.signer(key, results)
        emit({"event": "ready", "pid": os.getpid(), "mode": mode, "role": "checker", "containment": containment})
        return checker.serve(jobs, emit)

    from . import tamper
    from .job import run_job

    tamper.take_snapshot()  # before any user code: what the checker's tools are
    tamper.snapshot_runtime()
    intact = tamper.runtime_intact  # bound now: user code rebinding tamper's name does not reach it
    # The collection after each job then walks only what jobs made (0.1-0.2 s less before the next job
    # can start: torch and triton alone are ~180k objects); nothing of user code exists yet to be frozen.
    gc.freeze()

    def emit(message: dict) -> None:
        results.write(json.dumps(message, default=repr) + "\n")  # odd objects in user results: their repr
        results.flush()

    class Judge:
        """An isolated job's trials: the pool passes each request to the checker process and its verdict back,
        in order; ``send`` and ``receive`` let the job run its next trial while the checker judges one."""

        @staticmethod
        def send(request: dict) -> None:
            emit({"event": "judge", "request": request})

        @staticmethod
        def receive() -> dict:
            line = jobs.readline()
            if not line:
                os._exit(0)  # the pool went away
            return json.loads(line)

        def __call__(self, request: dict) -> dict:
            self.send(request)
            return self.receive()

    judge = Judge()

    emit({"event": "ready", "pid": os.getpid(), "mode": mode, "containment": containment})
    while True:
        line = jobs.readline()
        if not line:
            return 0
        if not line.strip():
            continue
        job = json.loads(line)
        _reap_children()
        result = run_job(job, emit, judge)
        # User code that changed the verifier's own code here must not meet another job: a fresh worker.
        recycle = not intact()
        emit({"event": "result", "id": job.get("id"), "result": result, "recycle": recycle})
        if not result.get("worker_healthy", True):
            return 3  # the device may be poisoned: the pool starts a fresh worker for the next job
        if recycle:
            return 4
        gc.collect()
        if mode == "gpu":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
