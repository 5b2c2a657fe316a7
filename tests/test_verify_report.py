"""Comparison, poisoning, speed statistics, reward and report building (in-process, no worker)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.verify import Harness, JobOutcome, Reward, VerificationReport, VerifyOptions
from mtmc_lsp.optimizer.verify.api import build_report
from mtmc_lsp.optimizer.verify.runtime import compare, timing
from mtmc_lsp.optimizer.verify.runtime.poison import poisoned_allocations
from mtmc_lsp.optimizer.verify.runtime.stats import speedup_stats


def test_compare_names_first_mismatch_and_errors():
    want = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    got = want.clone()
    got[1, 2] += 0.5
    got[2, 3] += 0.25
    result = compare.compare(got, want)
    assert not result["ok"]
    m = result["mismatch"]
    assert (m["index"], m["count"], m["atol"]) == ([1, 2], 2, 1e-4)
    assert m["actual"] == 6.5 and m["expected"] == 6.0
    assert result["max_abs"] == pytest.approx(0.5) and result["max_rel"] == pytest.approx(0.5 / 6)


def test_tolerances_follow_the_dtype():
    base = torch.ones(4)
    assert compare.compare(base + 5e-5, base)["ok"]
    assert not compare.compare(base + 5e-4, base)["ok"]
    half = torch.ones(4, dtype=torch.float16)
    assert compare.compare(half + 0.005, half)["ok"]
    assert not compare.compare(half + 0.05, half)["ok"]
    assert not compare.compare(torch.tensor([1, 2]), torch.tensor([1, 3]))["ok"]  # ints: exact
    assert compare.compare(base + 5e-4, base, atol=1e-3, rtol=0)["ok"]


def test_nan_where_finite_expected_is_a_mismatch_and_shape_dtype_structure_checked():
    want = torch.zeros(5)
    got = want.clone()
    got[3] = float("nan")
    assert compare.compare(got, want)["mismatch"]["index"] == [3]
    assert compare.nonfinite(got) == {"output": "output", "index": [3], "value": "nan", "count": 1}
    both = torch.tensor([float("nan"), 1.0])
    assert compare.compare(both.clone(), both)["ok"]
    assert "shape" in compare.compare(torch.zeros(4), torch.zeros(5))["mismatch"]["reason"]
    assert "dtype" in compare.compare(torch.zeros(4, dtype=torch.float16), torch.zeros(4))["mismatch"]["reason"]
    nested = compare.compare({"a": torch.ones(2), "b": (torch.ones(1), 3)}, {"a": torch.ones(2), "b": (torch.zeros(1), 3)})
    assert nested["mismatch"]["output"] == "output['b'][0]"


def test_input_mutation_is_found_bit_exactly():
    before = [torch.randn(6), 7]
    after = [before[0].clone(), 7]
    assert compare.tensors_equal(after, before) is None
    after[0][4] = torch.nextafter(before[0][4], torch.tensor(float("inf")))  # one ulp: no tolerance here
    found = compare.tensors_equal(after, before)
    assert found["output"] == "input[0]" and found["index"] == [4]


def test_poisoned_allocations_fill_empty_buffers_and_restore_torch():
    original = torch.empty
    with poisoned_allocations() as counter:
        a = torch.empty(8)
        b = torch.empty_like(torch.ones(3, dtype=torch.int32))
        c = torch.ones(2).new_empty(4)
        z = torch.zeros(3)
    assert torch.isnan(a).all() and torch.isnan(c).all() and (z == 0).all()
    assert (b == torch.iinfo(torch.int32).max).all()
    assert counter["buffers"] == 3
    assert torch.empty is original


def test_speedup_stats_median_ratio_and_band():
    rounds = [{"old": {"median_ms": o}, "new": {"median_ms": n}} for o, n in [(2.0, 1.0), (2.2, 1.0), (1.8, 1.0)]]
    s = speedup_stats(rounds, "old", "new")
    assert s["speedup"] == pytest.approx(2.0) and s["band"] == pytest.approx(0.2)
    assert s["baseline_ms"] == pytest.approx(2.0) and s["candidate_ms"] == pytest.approx(1.0)
    assert speedup_stats(rounds, "reference", "new") is None


def test_interleaved_rotates_the_order_and_uses_fresh_inputs(monkeypatch):
    calls = []

    def fake_bench(fn, warmup_ms, rep_ms, sync):
        fn()
        return {"median_ms": 1.0, "p20_ms": 1.0, "p80_ms": 1.0}

    monkeypatch.setattr(timing, "bench_ms", fake_bench)
    made = []
    impls = {name: (lambda args, name=name: calls.append((name, args[0]))) for name in ("old", "new", "reference")}
    rounds = timing.interleaved(impls, lambda r: made.append(r) or [r], 3, 1, 1, True, list, lambda m: None)
    assert made == [0, 1, 2] and len(rounds) == 3
    assert [c[0] for c in calls] == ["old", "new", "reference", "new", "reference", "old", "reference", "old", "new"]
    assert [c[1] for c in calls] == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_reward_terms():
    assert Reward.of(False, False, None).total == 0.0
    assert Reward.of(True, False, None).total == pytest.approx(0.1)
    r = Reward.of(True, True, None)
    assert (r.total, r.speed) == (pytest.approx(0.4), None)


def _gpu_outcome(old_ms: list[float], new_ms: list[float], recheck: dict | None = None) -> JobOutcome:
    rounds = [{"old": {"median_ms": o}, "new": {"median_ms": n}, "reference": {"median_ms": 2 * o}}
              for o, n in zip(old_ms, new_ms)]
    trial = {"seed": 0, "kind": "fresh", "ok": True, "checks": {"reference": {"ok": True, "max_abs": 1e-6, "max_rel": 1e-6},
                                                               "old": {"ok": True, "max_abs": 0.0, "max_rel": 0.0}}}
    result = {
        "environment": {"mode": "gpu", "device_name": "NVIDIA H200"},
        "compile": {"new": {"ok": True, "seconds": 1.5}},
        "runtime": {"input_bytes": 4_000_000, "output_bytes": 2_000_000, "input_kwargs": {"n": 10}},
        "trials": [dict(trial, seed=s) for s in range(3)],
        "speed": {"rounds": rounds}, "recheck": recheck, "worker_healthy": True,
    }
    return JobOutcome(result=result, worker="cuda:0")


def _report(outcome: JobOutcome, **opts) -> VerificationReport:
    harness = Harness("function", "scale_add", "reference")
    return build_report(outcome, harness, get_profile("h200"), VerifyOptions(**opts), "gpu", True,
                        {"target": "h200", "path": "k.py", "kernel": None})


def test_gpu_report_speed_band_roofline_and_reward():
    report = _report(_gpu_outcome([1.0, 1.02, 0.98, 1.0, 1.01], [0.5, 0.5, 0.5, 0.51, 0.5]),
                     step_label="step 3", previous_label="step 2")
    assert report.status == "verified" and report.mode == "gpu" and report.device == "NVIDIA H200"
    s = report.speed
    assert s.baseline == "previous" and s.speedup == pytest.approx(2.0) and s.believed
    assert s.band == pytest.approx(max(abs(r - 2.0) for r in s.ratios))
    assert s.speedup_vs_reference == pytest.approx(4.0)
    assert s.roofline_pct == pytest.approx(100 * 6e6 / 0.5e-3 / 1e9 / 4800)
    assert report.reward.total == pytest.approx(0.4 + math.log(2.0))
    assert report.summary.startswith("step 3 verified on NVIDIA H200: correct over 3 seeds vs reference and step 2; ")
    assert "2.00x faster than step 2 (1 -> 0.5 ms +/-2%)" in report.summary and "% of the memory roofline" in report.summary
    again = VerificationReport.from_json(json.loads(json.dumps(report.to_json())))
    assert again.speed.speedup == s.speedup and again.checks[-1].name == "speed"


def test_unchanged_kernel_is_within_noise():
    report = _report(_gpu_outcome([1.0, 1.01, 0.99], [1.0, 1.0, 1.0]))
    assert report.speed.within_noise and "within noise" in report.summary


def test_a_huge_speedup_without_a_passing_recheck_is_not_believed():
    wrong = {"ok": False, "max_abs": 1.0, "max_rel": 0.5, "mismatch": {
        "output": "output", "index": [3], "actual": 1.0, "expected": 2.0, "count": 1, "elements": 10, "atol": 1e-4,
        "rtol": 1e-4}}
    bad = {"trials": [{"seed": 1000, "kind": "shape", "ok": False, "checks": {"reference": wrong}}], "rounds": None,
           "shapes_varied": True}
    report = _report(_gpu_outcome([50.0] * 3, [1.0] * 3, recheck=None))
    assert not report.speed.believed and report.reward.speed is None
    report = _report(_gpu_outcome([50.0] * 3, [1.0] * 3, recheck=bad))
    # the recheck's wrong results make the kernel incorrect outright: no speed is reported at all
    assert report.speed is None and not report.correct and report.status == "incorrect"
    assert report.mismatch.trial == "shape" and report.reward.total == pytest.approx(0.1)
    assert "other shape" in report.summary and "index [3]" in report.summary
    good = {"trials": [{"seed": 1000, "kind": "fresh", "ok": True, "checks": {}}],
            "rounds": [{"old": {"median_ms": 49.0}, "new": {"median_ms": 1.0}}], "shapes_varied": True}
    report = _report(_gpu_outcome([50.0] * 3, [1.0] * 3, recheck=good))
    assert report.speed.believed and "rechecked" in report.speed.recheck
    assert report.reward.speed == pytest.approx(math.log(50.0))


def test_interpreter_report_never_estimates_speed():
    outcome = _gpu_outcome([1.0], [0.5])
    outcome.result["environment"] = {"mode": "interpreter", "device_name": "CPU (Triton interpreter)"}
    harness = Harness("function", "scale_add", "reference")
    report = build_report(outcome, harness, get_profile("h100"), VerifyOptions(), "interpreter", True,
                          {"target": "h100", "path": None, "kernel": None})
    assert report.speed is None and report.check("speed").status == "unavailable"
    assert report.summary == ("verified on CPU interpreter: correct over 3 seeds vs reference and previous; "
                              "speed: unavailable (no GPU)")
    assert report.reward.total == pytest.approx(0.4)


class _FakeGpuPool:
    """Stands in for a GPU pool: answers every job with a canned result from an H200."""

    mode = "gpu"

    def __init__(self, outcome: JobOutcome):
        self.outcome = outcome

    def run(self, job, compile_timeout_s, run_timeout_s, progress, cancel, key):
        return self.outcome


@pytest.mark.slow
def test_on_another_gpu_the_kernels_must_also_compile_for_the_target():
    import dataclasses
    from pathlib import Path

    from mtmc_lsp.optimizer.verify import verify_file

    text = (Path(__file__).resolve().parents[1] / "mtmc_lsp" / "examples" / "matmul.py").read_text()
    outcome = _gpu_outcome([1.0, 1.0, 1.0], [0.5, 0.5, 0.5])
    a100 = get_profile("a100")
    report = verify_file(text, text, "matmul.py", a100, VerifyOptions(pool=_FakeGpuPool(outcome)))
    assert report.status == "verified" and "compiled for A100 SXM (sm_80): matmul_kernel" in report.check("compile").message
    tiny = dataclasses.replace(a100, name="tiny A100", max_shared_per_block=1024)
    report = verify_file(text, text, "matmul.py", tiny, VerifyOptions(pool=_FakeGpuPool(outcome)))
    assert report.status == "compile_error" and report.reward.total == 0.0
    assert report.summary.startswith("not verified for tiny A100:") and "(ran on NVIDIA H200)" in report.summary
    same_arch = verify_file(text, text, "matmul.py", get_profile("h100"), VerifyOptions(pool=_FakeGpuPool(outcome)))
    assert "compiled for" not in same_arch.check("compile").message  # the launch already compiled for sm_90


def test_a_scaled_comparison_allows_both_sides_their_rounding_error():
    base = torch.full((8,), 0.25, dtype=torch.float32)
    assert not compare.compare(base + 1.8e-4, base)["ok"]  # one rounded side: atol + rtol*|x| = 1.25e-4
    scaled = compare.compare(base + 1.8e-4, base, scale=2.0)
    assert scaled["ok"]
    wrong = compare.compare(base + 1e-3, base, scale=2.0)
    assert not wrong["ok"] and wrong["mismatch"]["atol"] == pytest.approx(2e-4)
