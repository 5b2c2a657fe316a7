"""The GPU lock of several verifying processes: timing never overlaps another process's work, and is not starved."""

import multiprocessing
import os
import time

import pytest

from mtmc_lsp.optimizer.verify.runtime import gpu_lock

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the lock is for Linux GPU machines (flock, fork)")


def _worker(path: str, role: str, log, hold_s: float, rounds: int) -> None:
    os.environ[gpu_lock.ENV] = path
    gpu_lock._lock = None  # this child's own file descriptors
    for _ in range(rounds):
        with gpu_lock.shared():
            started = time.monotonic()
            time.sleep(hold_s)
            log.put((role, "shared", started, time.monotonic()))
            if role == "timer":
                with gpu_lock.alone():
                    started = time.monotonic()
                    time.sleep(hold_s)
                    log.put((role, "alone", started, time.monotonic()))
                started = time.monotonic()  # back to shared for the rest of the job
                time.sleep(hold_s / 2)
                log.put((role, "shared", started, time.monotonic()))


def _run(tmp_path, roles: list[str], hold_s: float, rounds: int) -> list[tuple]:
    context = multiprocessing.get_context("fork")
    log = context.Queue()
    path = str(tmp_path / "gpu.lock")
    children = [context.Process(target=_worker, args=(path, role, log, hold_s, rounds)) for role in roles]
    for child in children:
        child.start()
    intervals = []
    expected = sum((3 if role == "timer" else 1) * rounds for role in roles)
    while len(intervals) < expected:
        intervals.append(log.get(timeout=30))
    for child in children:
        child.join(timeout=30)
        assert child.exitcode == 0
    return intervals


def test_a_timing_round_overlaps_nothing_and_jobs_overlap_each_other(tmp_path):
    intervals = _run(tmp_path, ["timer", "timer", "job", "job", "job"], hold_s=0.05, rounds=4)
    alone = [(s, e) for _, mode, s, e in intervals if mode == "alone"]
    assert len(alone) == 8
    for start, end in alone:
        others = [(s, e) for _, _, s, e in intervals if (s, e) != (start, end)]
        assert all(e <= start + 1e-3 or s >= end - 1e-3 for s, e in others), "something ran during a timing round"
    shared = sorted((s, e) for _, mode, s, e in intervals if mode == "shared")
    assert any(b[0] < a[1] - 0.01 for a, b in zip(shared, shared[1:])), "jobs never ran side by side"


def test_a_waiting_timer_is_not_starved_by_a_stream_of_jobs(tmp_path):
    intervals = _run(tmp_path, ["timer"] + ["job"] * 6, hold_s=0.03, rounds=10)
    alone_ends = [e for _, mode, _, e in intervals if mode == "alone"]
    job_ends = sorted(e for role, _, _, e in intervals if role == "job")
    # writer preference: the timer's rounds finish while jobs are still coming, not after all of them
    assert len(alone_ends) == 10 and min(alone_ends) < job_ends[len(job_ends) // 2]


def test_without_the_variable_the_lock_is_nothing(monkeypatch):
    monkeypatch.delenv(gpu_lock.ENV, raising=False)
    monkeypatch.setattr(gpu_lock, "_lock", None)
    with gpu_lock.shared(), gpu_lock.alone():
        assert gpu_lock._lock is None


def _pid_or_fail(item: int) -> int:
    if item == 2:
        raise ValueError("two")
    return os.getpid()


def test_one_process_maps_in_this_one_and_more_read_items_only_as_they_start():
    from mtmc_lsp.optimizer.verify.shared_gpu import map_on_one_gpu

    results = dict(map_on_one_gpu(_pid_or_fail, [1, 2, 3], 1))
    assert results[1] == results[3] == os.getpid() and isinstance(results[2], ValueError)
    read: list[int] = []

    def items():
        for item in (1, 3, 4, 5, 6):
            read.append(item)
            yield item

    started = iter([True, True, True, False])
    spread = dict(map_on_one_gpu(_pid_or_fail, items(), 2, lambda: next(started, False)))
    assert set(spread) == {1, 3, 4} and read == [1, 3, 4] and os.getpid() not in spread.values()
