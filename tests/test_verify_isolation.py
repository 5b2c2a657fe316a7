"""The candidate runs where it cannot reach the checker: its outputs are judged in another process.

An isolated job (a previous version or a problem file to judge by) runs the new version in the
candidate worker, which holds no expected output and compares nothing; the checker worker regenerates
the inputs, runs the reference and the previous version, and compares; the pool believes only the
checker's verdicts. The planted faults below beat a verifier that judges in the candidate's process
(they patch its comparison module, read its kept outputs, or forge its trial results); here each is
incorrect. The unit tests pin the pool's rules for what the candidate may claim.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mtmc_lsp.optimizer.verify import (
    VerifyOptions,
    WorkerPool,
    build_job,
    discover_harness,
    verify_file,
)
from mtmc_lsp.optimizer.verify.pool import Worker, _Relay, judged_result

FAULTS = Path(__file__).resolve().parent / "corpus" / "faults"
BASE = (FAULTS / "base.py").read_text()


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool("interpreter")
    yield p
    p.close()


def verify(pool, name: str, old_text: str | None = BASE):
    options = VerifyOptions(pool=pool, compile_for_target=False, compile_timeout_s=60, run_timeout_s=60)
    return verify_file((FAULTS / f"{name}.py").read_text(), old_text, f"{name}.py", "h100", options)


@pytest.mark.slow
@pytest.mark.parametrize("name, named", [
    ("patch_checker_module", "from the reference"),  # 3x + y judged as it is, whatever it patched at home
    ("sealed_kept", "from the reference"),  # nothing kept in its process: it finds no answer, returns zeros
    ("forge_verdict", "never reached the checker"),  # its own claim of passing is not believed
])
def test_an_attack_from_the_candidates_process_cannot_change_the_verdict(pool, name, named):
    assert verify(pool, "base").status == "verified"  # expected outputs kept from an earlier job
    report = verify(pool, name)
    assert report.status == "incorrect", report.summary
    assert named in report.summary + json.dumps(report.to_json()["checks"]), report.summary
    assert report.raw["runtime"]["isolation"] == "checker process"
    assert verify(pool, "base").status == "verified"  # a patched worker was replaced, the next job is judged


@pytest.mark.slow
def test_inputs_that_are_not_tensors_cross_to_the_checker_unchanged(pool):
    text = BASE.replace("def scale_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:",
                        "def scale_add(x, y, dtype, device, shape, label):").replace(
        "    return [torch.randn(n, device=device, dtype=torch.float32), torch.randn(n, device=device, dtype=torch.float32)]",
        "    return [torch.randn(n, device=device), torch.randn(n, device=device), torch.float32, torch.device(device),"
        " torch.Size([n]), 'label']").replace(
        "def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:", "def reference(x, y, *rest):")
    options = VerifyOptions(pool=pool, compile_for_target=False, compile_timeout_s=60, run_timeout_s=60)
    report = verify_file(text, text, "odd_inputs.py", "h100", options)
    assert report.status == "verified", report.summary  # a dtype, a device, a Size and a str are not "mutated"
    assert report.raw["runtime"]["isolation"] == "checker process"


@pytest.mark.slow
def test_without_anything_to_judge_by_the_job_says_it_judged_itself(pool):
    report = verify(pool, "base", old_text=None)  # its own reference(): nothing outside its file
    assert report.status == "verified"
    assert report.raw["runtime"]["isolation"].startswith("none")


# The GPU path of an isolated job (timing after the checker's verdicts, the recheck, replaying a test's
# launches) on the CPU: both halves in one subprocess, do_bench replaced by a wall clock.
GPU_DRIVER = r"""
import json, os, statistics, sys, time
os.environ["TRITON_INTERPRET"] = "1"
from mtmc_lsp.optimizer.verify.runtime import checker, job as jobmod, timing

def wall_clock_bench(fn, warmup_ms, rep_ms, sync_all_streams):
    fn()
    times = []
    for _ in range(3):
        t0 = time.perf_counter(); fn(); times.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(times), "p20_ms": min(times), "p80_ms": max(times)}

timing.bench_ms = wall_clock_bench
jobmod.environment = lambda mode: {"mode": mode, "device_name": "fake GPU (CPU interpreter)"}
job = json.loads(sys.stdin.read())
session = checker.CheckerSession({k: v for k, v in job.items() if k != "new_text"}, lambda message: None)
session.device = "cpu"
session.open()
judged = []

def judge(request):
    reply = session.verdict_on(request)
    judged.append(request.get("kind"))
    return {**reply, "judge_id": str(len(judged))}

runner = jobmod.Job({**job, "side": "candidate"}, lambda message: None, judge)
runner.device = "cpu"
result = runner.run()
result["judged_kinds"] = judged
print(json.dumps(result))
"""

TEST_STYLE = '''import time

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 64),)](x, y, out, x.numel(), BLOCK=64)
    return out


def test_add(device="cpu"):
    x, y = torch.randn(200, device=device), torch.randn(200, device=device)
    out = add(x, y)
    return out
'''


def _isolated_gpu_job(new: str, old: str, **opts) -> dict:
    job = build_job(discover_harness(new), new, old, "gpu", VerifyOptions(timing_rounds=3, **opts))
    out = subprocess.run([sys.executable, "-c", GPU_DRIVER], input=json.dumps(job), capture_output=True, text=True,
                         timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_an_isolated_job_is_timed_after_the_checkers_verdicts_and_rechecked_through_it():
    slow = BASE.replace("import torch\n", "import time\n\nimport torch\n", 1).replace(
        "    return out\n", "    time.sleep(0.1)\n    return out\n", 1)
    result = _isolated_gpu_job(BASE, slow, input_kwargs={"n": 40}, recheck_speedup_above=3, adaptive_timing=False)
    assert all(t["ok"] and t.get("judge_id") for t in result["trials"])
    assert result["speed"]["rounds"] and all(set(r) == {"old", "new", "reference"} for r in result["speed"]["rounds"])
    recheck = result["recheck"]
    assert recheck["rounds"] and all(t["ok"] and t.get("judge_id") for t in recheck["trials"])
    assert result["judged_kinds"].count("shape") == 2  # the recheck's other shapes, judged by the checker too


@pytest.mark.slow
def test_an_isolated_test_style_job_replays_the_previous_versions_launches():
    old = TEST_STYLE.replace("    out = add(x, y)\n", "    out = add(x, y)\n    time.sleep(0.1)\n")
    result = _isolated_gpu_job(TEST_STYLE, old, adaptive_timing=False)
    assert all(t["ok"] and t.get("judge_id") and "old" in t["checks"] for t in result["trials"])
    assert result["speed"]["method"] == "test_add: 1 -> 1 launches of add_kernel replayed"


# -- the pool's rules, without workers -------------------------------------------------------------

JOB = {"harness": {"style": "function"}, "seeds": [0, 1], "new_text": "print('candidate')", "old_text": "old"}


class _FakeChecker:
    def log_tail(self) -> str:
        return ""


def _relay(verdicts: dict) -> _Relay:
    relay = _Relay(_FakeChecker(), JOB)
    relay.verdicts = verdicts
    return relay


def _verdict(seed: int, ok: bool, kind: str = "fresh") -> dict:
    check = {"ok": ok, "max_abs": 0.0 if ok else 1.0, "max_rel": 0.0, "mismatch": None if ok else {"index": [0]}}
    return {"request": {"seed": seed, "kind": kind}, "trial": {"ok": ok, "checks": {"reference": check}}}


def _result(*trials: dict) -> dict:
    return {"compile": {"new": {"ok": True}}, "runtime": {}, "trials": list(trials)}


def test_the_checker_never_receives_the_new_version():
    assert "new_text" not in _Relay(_FakeChecker(), JOB).job


def test_judged_trials_take_the_checkers_verdict_not_the_candidates_claim():
    relay = _relay({"a": _verdict(0, True), "b": _verdict(1, False)})
    claimed = _result({"seed": 0, "kind": "fresh", "ok": True, "judge_id": "a", "checks": {}},
                      {"seed": 1, "kind": "fresh", "ok": True, "judge_id": "b",
                       "checks": {"reference": {"ok": True}}})
    trials = judged_result(claimed, relay, JOB)["trials"]
    assert [t["ok"] for t in trials] == [True, False]
    assert trials[1]["checks"]["reference"]["ok"] is False
    assert claimed["runtime"]["isolation"] == "checker process"


def test_a_trial_the_checker_never_saw_fails():
    relay = _relay({"a": _verdict(0, True)})
    result = judged_result(_result({"seed": 0, "kind": "fresh", "ok": True, "judge_id": "a"},
                                   {"seed": 1, "kind": "fresh", "ok": True, "checks": {"reference": {"ok": True}}}),
                           relay, JOB)
    assert result["trials"][1]["ok"] is False and result["trials"][1]["error"]["type"] == "NotJudged"


def test_one_verdict_cannot_vouch_for_two_trials():
    relay = _relay({"a": _verdict(0, True)})
    result = judged_result(_result({"seed": 0, "kind": "fresh", "ok": True, "judge_id": "a"},
                                   {"seed": 1, "kind": "fresh", "ok": True, "judge_id": "a"}), relay, JOB)
    assert [t["ok"] for t in result["trials"]] == [True, False]


def test_a_failing_verdict_left_out_of_the_result_is_added_back():
    relay = _relay({"a": _verdict(0, True), "b": _verdict(1, True), "c": _verdict(1, False, "same_storage")})
    result = judged_result(_result({"seed": 0, "kind": "fresh", "ok": True, "judge_id": "a"},
                                   {"seed": 1, "kind": "fresh", "ok": True, "judge_id": "b"}), relay, JOB)
    assert not all(t["ok"] for t in result["trials"])
    assert result["trials"][-1]["kind"] == "same_storage"


def test_a_candidate_claiming_more_than_the_checker_said_is_marked_for_replacement():
    relay = _relay({"a": _verdict(0, True), "b": _verdict(1, False)})
    honest = judged_result(_result({"seed": 0, "kind": "fresh", "ok": True, "judge_id": "a"},
                                   {"seed": 1, "kind": "fresh", "ok": False, "judge_id": "b"}), relay, JOB)
    assert "candidate_misreported" not in honest["runtime"]
    relay = _relay({"a": _verdict(0, True), "b": _verdict(1, False)})
    lying = judged_result(_result({"seed": 0, "kind": "fresh", "ok": True, "judge_id": "a"},
                                  {"seed": 1, "kind": "fresh", "ok": True, "judge_id": "b"}), relay, JOB)
    assert lying["runtime"]["candidate_misreported"] is True


def test_the_worker_notices_its_verifier_code_was_changed():
    from mtmc_lsp.optimizer.verify.runtime import compare, tamper

    tamper.snapshot_runtime()
    assert tamper.runtime_intact()
    original = compare.compare
    compare.compare = lambda *a, **k: {"ok": True}
    try:
        assert not tamper.runtime_intact()
    finally:
        compare.compare = original
    code = compare.nonfinite.__code__
    compare.nonfinite.__code__ = (lambda value: None).__code__
    try:
        assert not tamper.runtime_intact()
    finally:
        compare.nonfinite.__code__ = code
    assert tamper.runtime_intact()


def test_every_seed_must_be_judged():
    relay = _relay({"a": _verdict(0, True)})
    result = judged_result(_result({"seed": 0, "kind": "fresh", "ok": True, "judge_id": "a"}), relay, JOB)
    assert not all(t["ok"] for t in result["trials"])
    assert "seed 1" in result["trials"][-1]["error"]["message"]


def test_a_self_judged_job_keeps_its_own_trials_and_says_so():
    relay = _relay({})
    relay.self_judged = "the inputs come only from the candidate's own file"
    result = judged_result(_result({"seed": 0, "kind": "fresh", "ok": True, "checks": {"reference": {"ok": True}}}),
                           relay, JOB)
    assert result["trials"][0]["ok"] is True
    assert result["runtime"]["isolation"].startswith("none: the inputs")


def test_only_lines_the_checker_signed_are_read_from_its_pipe():
    checker = Worker(None, role="checker")
    checker._key = os.urandom(32)
    read, write = os.pipe()
    checker._res_r = read
    try:
        body = json.dumps({"event": "verdict", "rid": "x", "trial": {"ok": True}})
        forged = json.dumps({"mac": "0" * 64, "body": body})
        os.write(write, (forged + "\n").encode())
        message, status = checker._next_message(float("inf"), lambda: False)
        assert message is None and "did not sign" in status
        mac = hmac.new(checker._key, body.encode(), hashlib.sha256).hexdigest()
        os.write(write, (json.dumps({"mac": mac, "body": body}) + "\n").encode())
        message, status = checker._next_message(float("inf"), lambda: False)
        assert status is None and message["trial"] == {"ok": True}
    finally:
        os.close(read)
        os.close(write)
        checker.close()
