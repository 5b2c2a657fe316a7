"""Candidates that attack the checker instead of computing: each is caught, and the worker survives.

The candidate runs before any expected output of its seed exists, and outputs kept between jobs
are sealed bytes, so the answer cannot be found through gc or the callers' frames. Faults that
only misbehave (prints, forks, leaks) must leave a correct result verified and the worker usable.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.verify import VerifyOptions, WorkerPool, verify_file

FAULTS = Path(__file__).resolve().parent / "corpus" / "faults"
BASE = (FAULTS / "base.py").read_text()

pytestmark = pytest.mark.slow  # interpreter runs in a worker process


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool("interpreter")
    yield p
    p.close()


def verify(pool, name: str):
    options = VerifyOptions(pool=pool, compile_for_target=False, compile_timeout_s=60, run_timeout_s=60)
    return verify_file((FAULTS / f"{name}.py").read_text(), BASE, f"{name}.py", "h100", options)


@pytest.mark.parametrize("name", ["gc_reference", "frame_peek", "patch_allclose", "patch_tensor_ops",
                                  "lower_precision", "imported_empty"])
def test_an_attack_on_the_checker_is_incorrect(pool, name):
    verify(pool, "base")  # a kept expected output from an earlier job must not help either
    report = verify(pool, name)
    assert report.status == "incorrect", report.summary


def test_replacing_the_checkers_tools_is_named_and_the_worker_replaced(pool):
    report = verify(pool, "patch_tensor_ops")
    assert report.status == "incorrect" and "torch.Tensor.__sub__" in report.summary
    assert verify(pool, "base").status == "verified"  # a fresh worker: the patch died with the old one


@pytest.mark.parametrize("name", ["print_flood", "memory_leak", "fork_child"])
def test_misbehaving_but_correct_code_verifies_and_the_worker_survives(pool, name):
    report = verify(pool, name)
    assert report.status == "verified", report.summary
    assert verify(pool, "base").status == "verified"


def _members(group: int) -> list[int]:
    """Live processes of a process group (from /proc: the fifth field of stat is the group; zombies left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == group and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def test_a_forked_child_does_not_outlive_its_job():
    own = WorkerPool("interpreter")
    report = verify(own, "fork_child")
    assert report.status == "verified"
    assert report.raw["runtime"]["processes_killed"] >= 1  # the children it forked, killed as the job ended
    (worker,) = own._workers
    group = worker.proc.pid  # started in its own session: its pid is its process group
    namespaced = worker.contained.startswith(("root:", "user namespace"))
    assert len(_members(group)) == (3 if namespaced else 1)  # the sandbox's launcher and init, the worker
    own.close()
    deadline = time.monotonic() + 5
    while _members(group) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _members(group)
