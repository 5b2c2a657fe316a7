"""The roofline in the speed report: the reference's FLOPs, which ceiling binds, and the line that says so."""

from __future__ import annotations

import json
import statistics
import time

import pytest
import torch

from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.verify import Harness, JobOutcome, VerificationReport, VerifyOptions, build_job
from mtmc_lsp.optimizer.verify.api import build_report
from mtmc_lsp.optimizer.verify.report import Speed, peak_key, roofline_figures
from mtmc_lsp.optimizer.verify.runtime import job as jobmod
from mtmc_lsp.optimizer.verify.runtime import timing
from mtmc_lsp.optimizer.verify.runtime.flops import count_flops, dominant_float_dtype

H200 = get_profile("h200")


def _speed(flops: int | None, torch_dtype: str | None, bytes_moved: int, seconds: float, profile=H200) -> Speed:
    """A Speed as ``api._speed`` builds it, from synthetic figures."""
    dtype = peak_key(torch_dtype, profile.peak_tflops)
    figures = roofline_figures(flops, dtype, bytes_moved, seconds, profile.peak_tflops, profile.memory_bandwidth_gbs)
    return Speed(baseline="previous", baseline_ms=2e3 * seconds, candidate_ms=1e3 * seconds, speedup=2.0, band=0.02,
                 rounds=3, ratios=[2.0] * 3, believed=True, bytes_moved=bytes_moved, flops=flops, flop_dtype=dtype,
                 **figures)


def test_a_matmul_is_held_against_the_compute_roofline():
    m = n = k = 4096
    flops = 2 * m * n * k
    seconds = flops / 640e12  # 640 TFLOP/s, what the optimized matmul reached on the H200
    s = _speed(flops, "float16", 3 * m * n * 2, seconds)
    assert s.bound == "compute" and s.flop_dtype == "fp16"
    assert s.achieved_tflops == pytest.approx(640) and s.compute_pct == pytest.approx(100 * 640 / 989)
    assert s.roofline_pct == pytest.approx(100 * (3 * m * n * 2 / seconds / 1e9) / 4800)  # still the memory figure
    text = s.describe("step 2")
    assert text.endswith(", 65% of the compute roofline (640 TFLOP/s)") and "memory roofline" not in text


def test_an_elementwise_kernel_is_held_against_the_memory_roofline():
    bytes_moved = 3 * 2**24 * 2
    seconds = bytes_moved / 4080e9
    for flops in (0, 2**24):  # FlopCounterMode counts elementwise work as 0; one FLOP per element is still far below the ridge
        s = _speed(flops, "float16", bytes_moved, seconds)
        assert s.bound == "memory" and s.roofline_pct == pytest.approx(85)
        assert s.describe("step 2").endswith(", 85% of the memory roofline (4,080 GB/s)")


def test_no_flop_count_or_no_peak_for_the_dtype_gives_the_memory_line():
    seconds = 1e-3
    no_count = _speed(None, "float16", 2_400_000_000, seconds)
    assert no_count.bound == "memory" and no_count.achieved_tflops is None and no_count.compute_pct is None
    assert no_count.describe("step 2").endswith(", 50% of the memory roofline (2,400 GB/s)")
    fp64 = _speed(10**15, "float64", 2_400_000_000, seconds)  # compute-bound by intensity, but no fp64 peak on file
    assert fp64.flop_dtype == "fp64" and fp64.bound == "memory" and fp64.compute_pct is None
    assert fp64.describe("step 2").endswith(", 50% of the memory roofline (2,400 GB/s)")
    slow = _speed(None, None, 1_000_000, 1.0)
    assert slow.describe("step 2").endswith(", 0% of the memory roofline (0.001 GB/s)")


def test_the_ridge_point_decides_the_bound():
    ridge = H200.ridge_point("fp16")  # ~206 FLOP/byte
    bytes_moved = 10**9
    assert _speed(int(1.1 * ridge * bytes_moved), "float16", bytes_moved, 1e-2).bound == "compute"
    assert _speed(int(0.9 * ridge * bytes_moved), "float16", bytes_moved, 1e-2).bound == "memory"


def test_fp32_is_held_against_tf32_when_the_target_has_it():
    assert peak_key("float32", H200.peak_tflops) == "tf32"
    assert peak_key("float32", get_profile("v100").peak_tflops) == "fp32"
    assert (peak_key("bfloat16", {}), peak_key("float8_e4m3fn", {}), peak_key(None, {})) == ("bf16", "fp8", None)


def test_old_reports_without_flop_fields_still_load():
    s = _speed(None, None, 6_000_000, 0.5e-3)
    data = json.loads(json.dumps(dict(vars(s))))
    for key in ("flops", "flop_dtype", "achieved_tflops", "compute_pct", "bound"):
        data.pop(key)
    again = Speed(**data)
    assert again.bound == "memory" and "% of the memory roofline" in again.describe("step 2")


def _gpu_result(runtime: dict) -> JobOutcome:
    trial = {"seed": 0, "kind": "fresh", "ok": True, "checks": {"reference": {"ok": True, "max_abs": 0.0, "max_rel": 0.0},
                                                               "old": {"ok": True, "max_abs": 0.0, "max_rel": 0.0}}}
    rounds = [{"old": {"median_ms": 0.43}, "new": {"median_ms": 0.215}, "reference": {"median_ms": 0.3}}] * 3
    return JobOutcome(result={
        "environment": {"mode": "gpu", "device_name": "NVIDIA H200"}, "compile": {"new": {"ok": True, "seconds": 1.0}},
        "runtime": runtime, "trials": [dict(trial, seed=s) for s in range(3)], "speed": {"rounds": rounds},
        "recheck": None, "worker_healthy": True}, worker="cuda:0")


def test_the_report_summary_names_the_binding_ceiling_and_round_trips():
    m = 4096
    runtime = {"input_bytes": 2 * m * m * 2, "output_bytes": m * m * 2, "flops": 2 * m**3, "flop_dtype": "float16"}
    report = build_report(_gpu_result(runtime), Harness("function", "matmul", "reference"), H200, VerifyOptions(),
                          "gpu", True, {"target": "h200", "path": "k.py", "kernel": None})
    assert report.status == "verified" and report.speed.bound == "compute", report.summary
    assert report.speed.achieved_tflops == pytest.approx(2 * m**3 / 0.215e-3 / 1e12)
    assert "% of the compute roofline (639 TFLOP/s)" in report.summary
    assert report.speed.roofline_pct is not None  # the memory figure stays for its readers
    again = VerificationReport.from_json(json.loads(json.dumps(report.to_json())))
    assert (again.speed.flops, again.speed.flop_dtype, again.speed.bound) == (2 * m**3, "fp16", "compute")


# -- the worker's FLOP count ------------------------------------------------------------------------


def test_count_flops_of_a_matmul_and_of_elementwise_work():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    assert count_flops(lambda args: torch.matmul(*args), [a, b]) == {"flops": 2 * 8 * 4 * 16, "flop_dtype": "float32"}
    got = count_flops(lambda args: torch.softmax(args[0] * 2 + 1, dim=-1), [a.half()])
    assert got == {"flops": 0, "flop_dtype": "float16"}
    broken = count_flops(lambda args: 1 / 0, [a])
    assert broken["flops"] is None and broken["flops_error"].startswith("ZeroDivisionError")


def test_the_operand_dtype_is_the_largest_floating_input():
    args = [torch.zeros(4, dtype=torch.float32), {"w": torch.zeros(64, dtype=torch.bfloat16)}, torch.zeros(1000, dtype=torch.int64), 3]
    assert dominant_float_dtype(args) == "bfloat16"
    assert dominant_float_dtype([torch.zeros(3, dtype=torch.int32), object()]) is None


MATMUL = '''
import torch

def get_inputs(m=24, n=20, k=12, device="cpu"):
    return [torch.randn(m, k, device=device), torch.randn(k, n, device=device)]

def reference(a, b):
    return a @ b

def matmul(a, b):
    return torch.matmul(a, b)
'''

# Refuses to run under a dispatch mode (as code that traces or captures itself may): FlopCounterMode is one.
REFUSES_FLOP_COUNTING = MATMUL.replace('''def reference(a, b):
    return a @ b''', '''def reference(a, b):
    from torch.utils._python_dispatch import _get_current_dispatch_mode
    if _get_current_dispatch_mode() is not None:
        raise RuntimeError("reference cannot run under a dispatch mode")
    return a @ b''')


def _wall_clock_bench(fn, warmup_ms, rep_ms, sync_all_streams):
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return {"median_ms": statistics.median(times), "p20_ms": min(times), "p80_ms": max(times)}


def _run_gpu_job_on_cpu(text: str, monkeypatch) -> VerificationReport:
    """The worker's GPU path (correctness, FLOP count, timing) in-process, with a wall-clock timer on the CPU."""
    monkeypatch.setattr(timing, "bench_ms", _wall_clock_bench)
    monkeypatch.setattr(jobmod, "environment", lambda mode: {"mode": mode, "device_name": "fake GPU (CPU)"})
    harness = Harness("function", "matmul", "reference")
    options = VerifyOptions(timing_rounds=2)
    runner = jobmod.Job(build_job(harness, text, text, "gpu", options), lambda message: None)
    runner.device = "cpu"
    result = runner.run()
    return build_report(JobOutcome(result=result, worker="cuda:0"), harness, H200, options, "gpu", True,
                        {"target": "h200", "path": "k.py", "kernel": None})


def test_the_job_counts_the_reference_flops(monkeypatch):
    report = _run_gpu_job_on_cpu(MATMUL, monkeypatch)
    assert report.status == "verified", report.summary
    assert report.raw["runtime"]["flops"] == 2 * 24 * 20 * 12 and report.raw["runtime"]["flop_dtype"] == "float32"
    assert report.speed.flops == 2 * 24 * 20 * 12 and report.speed.flop_dtype == "tf32"
    assert report.speed.achieved_tflops is not None and report.speed.bound == "memory"  # 10 FLOP/byte << ridge


def test_a_reference_that_breaks_flop_counting_still_verifies(monkeypatch):
    report = _run_gpu_job_on_cpu(REFUSES_FLOP_COUNTING, monkeypatch)
    assert report.status == "verified" and report.reward.speed is not None, report.summary
    assert report.raw["runtime"]["flops"] is None and "dispatch mode" in report.raw["runtime"]["flops_error"]
    assert report.speed.flops is None and report.speed.bound == "memory"
    assert "% of the memory roofline (" in report.summary
