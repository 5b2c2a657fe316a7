"""One GPU shared by several verifying processes: jobs run side by side, timing runs alone.

``mtmc train collect --processes N`` (and the KernelBench loop) run N verifier pools on one GPU so
that imports, compiles and correctness trials of many candidates overlap on the machine's cores. A
timing round must not share the GPU with another process's kernels (time-slicing between contexts
would be measured), so the pools agree through a lock file named by ``MTMC_GPU_LOCK``: a job holds
it shared while it runs, and converts to exclusive for its timing rounds. Without the variable
every call is a no-op (one pool, the GPU is its own).

Writers go first: a shared taker passes through a turnstile that a waiting writer holds, so a
stream of new jobs cannot keep a timing round waiting (the classic writer-preferring rwlock, with
two ``flock`` files). Only scheduling depends on this lock, never a verdict.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Iterator

ENV = "MTMC_GPU_LOCK"


class _Lock:
    def __init__(self, path: str):
        self.main = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        self.turnstile = os.open(path + ".turnstile", os.O_RDWR | os.O_CREAT, 0o666)
        self.mode = 0  # 0 (none), fcntl.LOCK_SH or fcntl.LOCK_EX

    def take(self, mode: int) -> None:
        if self.mode == mode:
            return
        if self.mode:  # flock converts by release and re-take; released first, so two converters never deadlock
            fcntl.flock(self.main, fcntl.LOCK_UN)
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.main, mode)  # a writer waits here holding the turnstile: new readers queue behind it
        finally:
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        self.mode = mode

    def release(self) -> None:
        if self.mode:
            fcntl.flock(self.main, fcntl.LOCK_UN)
            self.mode = 0


_lock: _Lock | None = None


def _get() -> _Lock | None:
    global _lock
    path = os.environ.get(ENV)
    if not path:
        return None
    if _lock is None:
        _lock = _Lock(path)
    return _lock


@contextlib.contextmanager
def shared() -> Iterator[None]:
    """Hold the GPU with other jobs (imports, compiles, correctness trials)."""
    lock = _get()
    if lock is None or lock.mode:  # nested inside a held lock: keep what is held
        yield
        return
    lock.take(fcntl.LOCK_SH)
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def alone() -> Iterator[None]:
    """Hold the GPU alone (timing); returns to the mode held before."""
    lock = _get()
    if lock is None:
        yield
        return
    before = lock.mode
    lock.take(fcntl.LOCK_EX)
    try:
        yield
    finally:
        if before:
            lock.take(before)
        else:
            lock.release()
