"""The worker process: reads jobs (JSON lines) from one pipe, answers on another, until EOF.

User code may print anything: stdout and stderr go to a log file that the pool reads after a
crash; the protocol uses two dedicated pipe descriptors passed on the command line.
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


def main(job_fd: int, result_fd: int) -> int:
    # TRITON_INTERPRET (CPU) or CUDA_VISIBLE_DEVICES (GPU) were set by the pool before we started.
    # A segfault or abort in user code then leaves a Python traceback (with the user's line) in the log.
    faulthandler.enable()
    # The pool sends SIGUSR1 before killing a job that timed out: the dump shows where it hung.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    _exit_with_parent(os.getppid())
    import torch  # noqa: F401  - imported once, before any job, so jobs measure only their own work

    from . import tamper
    from .job import run_job

    tamper.take_snapshot()  # before any user code: what the checker's tools are

    jobs = os.fdopen(job_fd, "r", encoding="utf-8")
    results = os.fdopen(result_fd, "w", encoding="utf-8")

    def emit(message: dict) -> None:
        results.write(json.dumps(message, default=repr) + "\n")  # odd objects in user results: their repr
        results.flush()

    mode = os.environ.get("MTMC_VERIFY_MODE", "interpreter")
    if mode == "gpu":
        import torch

        torch.cuda.init()
    emit({"event": "ready", "pid": os.getpid(), "mode": mode})
    for line in jobs:
        if not line.strip():
            continue
        job = json.loads(line)
        result = run_job(job, emit)
        emit({"event": "result", "id": job.get("id"), "result": result})
        if not result.get("worker_healthy", True):
            return 3  # the device may be poisoned: the pool starts a fresh worker for the next job
        gc.collect()
        if mode == "gpu":
            import torch

            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
