"""The GPU-only parts of a job (timing rounds, the >10x recheck, the report) driven on the CPU.

The job runs in a subprocess under the Triton interpreter with do_bench replaced by a wall-clock
timer, so everything from the worker's timing code to the report's speed figures is exercised
without a GPU. Only do_bench itself and CUDA synchronisation are left to benchmarks/verify_gpu.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.verify import JobOutcome, VerifyOptions, build_job, discover_harness
from mtmc_lsp.optimizer.verify.api import build_report

ROOT = Path(__file__).resolve().parents[1]
BASE = (ROOT / "tests" / "corpus" / "faults" / "base.py").read_text()
SLOW = BASE.replace("import torch\n", "import time\n\nimport torch\n", 1).replace(
    "    return out\n", "    time.sleep(0.1)\n    return out\n", 1)

DRIVER = r"""
import json, os, statistics, sys, time
os.environ["TRITON_INTERPRET"] = "1"
from mtmc_lsp.optimizer.verify.runtime import job as jobmod, timing

def wall_clock_bench(fn, warmup_ms, rep_ms, sync_all_streams):
    fn()
    times = []
    for _ in range(3):
        t0 = time.perf_counter(); fn(); times.append((time.perf_counter() - t0) * 1e3)
    m = statistics.median(times)
    return {"median_ms": m, "p20_ms": min(times), "p80_ms": max(times)}

timing.bench_ms = wall_clock_bench
jobmod.environment = lambda mode: {"mode": mode, "device_name": "fake GPU (CPU interpreter)"}
job = json.loads(sys.stdin.read())
runner = jobmod.Job(job, lambda message: None)
runner.device = "cpu"
print(json.dumps(runner.run()))
"""


def run_gpu_job(new: str, old: str, **opts) -> dict:
    harness = discover_harness(new)
    job = build_job(harness, new, old, "gpu", VerifyOptions(timing_rounds=3, **opts))
    out = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(job), capture_output=True, text=True,
                         timeout=240, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def report_of(result: dict, new: str, **opts):
    return build_report(JobOutcome(result=result, worker="cuda:0"), discover_harness(new), get_profile("h200"),
                        VerifyOptions(**opts), "gpu", True, {"target": "h200", "path": "k.py", "kernel": None})


@pytest.mark.slow
def test_timing_rounds_and_the_recheck_of_a_huge_speedup():
    # The interpreter is slow, so the threshold is lowered from 10x to 3x; the path is the same.
    result = run_gpu_job(BASE, SLOW, input_kwargs={"n": 40}, recheck_speedup_above=3, adaptive_timing=False)
    rounds = result["speed"]["rounds"]
    assert len(rounds) == 3 and all(set(r) == {"old", "new", "reference"} for r in rounds)
    recheck = result["recheck"]
    assert recheck is not None and recheck["shapes_varied"]
    kinds = [t["kind"] for t in recheck["trials"]]
    assert kinds.count("fresh") == 6 and kinds.count("same_storage") == 5 and kinds.count("shape") == 2
    assert [t["input_kwargs"]["n"] for t in recheck["trials"] if t["kind"] == "shape"] == [31, 23]
    assert recheck["rounds"] and all(t["ok"] for t in recheck["trials"])
    report = report_of(result, BASE, recheck_speedup_above=3)
    assert report.status == "verified" and report.speed.speedup > 3 and report.speed.believed, report.summary
    assert "over 3x: rechecked with 13 more trials and other shapes" in report.speed.recheck
    assert report.speed.roofline_pct is not None and report.reward.speed > 1


@pytest.mark.slow
def test_no_recheck_below_the_threshold_and_no_timing_when_incorrect():
    result = run_gpu_job(BASE, BASE, input_kwargs={"n": 40}, recheck_speedup_above=1e9)
    assert result["speed"] is not None and result["recheck"] is None
    wrong = (ROOT / "tests" / "corpus" / "faults" / "wrong_element.py").read_text()
    result = run_gpu_job(wrong, BASE, input_kwargs={"n": 40})
    assert result["speed"] is None  # an incorrect kernel is never timed
    assert report_of(result, wrong).speed_unavailable_reason.startswith("not measured (the kernel is not correct)")


def test_inputs_without_a_device_argument_are_made_on_the_gpu():
    """KernelBench's get_inputs() makes CPU tensors; on a device they are made there (4 s a call on the H200's host)."""
    import torch

    from mtmc_lsp.optimizer.verify.runtime.job import inputs_made_on

    with inputs_made_on("meta", {}):  # "meta" stands in for "cuda": the same default-device context
        assert torch.randn(4, 4).device.type == "meta"
    with inputs_made_on("meta", {"device": "meta"}):  # get_inputs(device=...) places its tensors itself
        assert torch.randn(4, 4).device.type == "cpu"
    with inputs_made_on("cpu", {}):
        assert torch.randn(4, 4).device.type == "cpu"


# Only whole groups of 8 elements are written: the file supports sizes divisible by 8 (as TMA needs 16-byte rows).
EIGHTS = BASE.replace("    n_elements = x.numel()\n", "    n_elements = x.numel() // 8 * 8\n", 1)
EIGHTS_SLOW = SLOW.replace("    n_elements = x.numel()\n", "    n_elements = x.numel() // 8 * 8\n", 1)


@pytest.mark.slow
def test_a_recheck_shape_the_previous_version_also_misses_is_skipped_not_failed():
    """H200, session 13: the held-out tutorial matmul's TMA descriptors need 16-byte rows; the recheck's K = 3073
    broke the accepted file as much as the step, and a 10x step was counted as wrong."""
    result = run_gpu_job(EIGHTS, EIGHTS_SLOW, input_kwargs={"n": 40}, recheck_speedup_above=3, adaptive_timing=False)
    shape_trials = [t for t in result["recheck"]["trials"] if t["kind"] == "shape"]
    assert len(shape_trials) == 2 and all(t["ok"] and t["skipped"] for t in shape_trials)
    assert all(not t["checks"]["previous_vs_reference"]["ok"] for t in shape_trials)
    report = report_of(result, EIGHTS, recheck_speedup_above=3)
    assert report.status == "verified" and report.speed.believed, report.summary
    assert "2 other shapes skipped: the previous version misses the reference there too" in report.speed.recheck
    # A step that breaks a shape the previous version handles is still caught there.
    result = run_gpu_job(EIGHTS, SLOW, input_kwargs={"n": 40}, recheck_speedup_above=3, adaptive_timing=False)
    shape_trials = [t for t in result["recheck"]["trials"] if t["kind"] == "shape"]
    assert shape_trials and not any(t["ok"] for t in shape_trials) and not any(t.get("skipped") for t in shape_trials)
    caught = report_of(result, EIGHTS, recheck_speedup_above=3)
    assert caught.status == "incorrect" and "other shape" in caught.summary, caught.summary
