"""The report generator and the run summary, on a small synthetic results file (no GPU needed)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _module("bench")
report = _module("report")


def _variant(ms: float, floor_ms: float, **extra) -> dict:
    return {"ms": ms, "ms_rounds": [ms, ms * 1.01, ms * 0.99], "noise": 0.02, "correct": True, "rel_err": 1e-6,
            "pct_of_floor": 100 * floor_ms / ms, "gbs": 1.0, "tflops": 1.0, **extra}


def _kernel(name: str, bound: str, floor_ms: float, times: dict, intensity: float) -> dict:
    variants = {n: _variant(ms, floor_ms) for n, ms in times.items() if ms is not None}
    if times.get("compile_max_autotune") is None:
        variants["compile_max_autotune"] = {"correct": False, "skipped": "memory-bound kernel"}
    bytes_moved = 1_000_000_000
    return {
        "name": name, "op_class": "x", "bound": bound, "floor_ms": floor_ms, "bytes": bytes_moved,
        "flops": int(bytes_moved * intensity), "intensity": intensity, "shapes": [[1024, 1024]], "tolerance": 1e-4,
        "variants": variants, "speedups": bench.speedups(variants), "noise": 0.02,
        "optimize": {"method": "search", "verifications": 3, "wall_s": 12.0, "stopped": "no improvement",
                     "steps": [{"candidate": {"kernel": f"{name}_kernel", "action": "tiling"}, "action": "tiling()",
                                "status": "kept", "speedup": 2.0}]},
    }


def synthetic_results() -> dict:
    kernels = [
        _kernel("softmax", "memory", 0.25, {"naive": 1.0, "mtmc": 0.3, "eager": 0.8, "compile": 0.5}, 0.6),
        _kernel("matmul", "compute", 1.6, {"naive": 12.0, "mtmc": 2.0, "eager": 1.6, "compile": 1.6,
                                           "compile_max_autotune": 1.7}, 2700.0),
    ]
    return {
        "schema": 1, "mode": "gpu", "device": "cuda",
        "environment": {"gpu": "NVIDIA H200", "driver": "580.159.04", "torch": "2.11.0", "triton": "3.6.0",
                        "cuda": "13.0", "python": "3.12.3", "date": "2026-11-29 18:00:00 UTC"},
        "settings": {"steps": 3, "policy": "heuristic", "rounds": 3},
        "optimizer": {"method": "search"},
        "ceilings": {"copy_gbs": 4221.0, "matmul_tflops": 687.0, "matmul_shape": [8192] * 3, "matmul_dtype": "bfloat16"},
        "kernels": kernels, "summary": bench.summarize(kernels), "total_wall_s": 300.0,
    }


def test_speedups_use_the_better_compile_mode():
    variants = {"naive": {"ms": 8.0}, "mtmc": {"ms": 2.0}, "eager": {"ms": 4.0}, "compile": {"ms": 3.0},
                "compile_max_autotune": {"ms": 2.5}}
    assert bench.speedups(variants) == {"over_naive": 4.0, "over_eager": 2.0, "over_compile": 1.5,
                                        "over_compile_max_autotune": 1.25, "over_best_compile": 1.25}


def test_summary_geomeans_and_targets():
    summary = synthetic_results()["summary"]
    assert summary["geomean_over_naive"] == pytest.approx((1.0 / 0.3 * 12.0 / 2.0) ** 0.5)
    assert summary["geomean_over_best_compile"] == pytest.approx((0.5 / 0.3 * 1.6 / 2.0) ** 0.5)
    assert summary["verifications"] == 6
    targets = summary["targets"]
    assert targets["geomean_over_naive_ge_4"] is True  # sqrt(3.33 * 6) = 4.47
    assert targets["every_kernel_within_1_25x_of_compile"] is True  # matmul: 1.6 / 2.0 = 0.8 >= 1 / 1.25
    assert targets["memory_bound_ge_70pct_of_floor"] is True  # softmax: 0.25 / 0.3 = 83%
    assert summary["memory_bound_pct_of_floor"]["softmax"] == pytest.approx(100 * 0.25 / 0.3)


def test_report_writes_plots(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "results.json"
    path.write_text(json.dumps(synthetic_results()))
    written = report.generate(path)
    names = {p.name for p in written}
    assert names == {"report.md", "speedup.png", "roofline.png", "floor.png"}
    for png in ("speedup.png", "roofline.png", "floor.png"):
        data = (tmp_path / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert "![roofline.png](roofline.png)" in (tmp_path / "report.md").read_text()


def test_report_markdown_table_and_headline():
    text = report.markdown(synthetic_results(), [])
    assert "NVIDIA H200 (driver 580.159.04), torch 2.11.0, triton 3.6.0" in text
    assert "| softmax | x | memory | 1.000 | 0.300 | 0.800 | 0.500 | skipped | 0.250 | 83% | 3.33x |" in text
    assert "| matmul | x | compute | 12.000 | 2.000 | 1.600 | 1.600 | 1.700 | 1.600 | 80% | 6.00x |" in text
    assert "| over the naive start | 4.47x | >= 4x: met |" in text
    assert "`tiling()` on softmax_kernel kept 2.00x" in text


def test_report_without_timings_is_refused(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"mode": "cpu-smoke", "kernels": []}))
    assert report.main([str(path)]) == 1


def test_report_command_line_regenerates_into_another_folder(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "results.json"
    path.write_text(json.dumps(synthetic_results()))
    assert report.main([str(path), "--out", str(tmp_path / "rendered")]) == 0
    assert (tmp_path / "rendered" / "report.md").is_file() and (tmp_path / "rendered" / "speedup.png").is_file()


def test_check_catches_a_wrong_tile_a_nan_and_input_mutation():
    import torch

    torch.manual_seed(0)
    ref = torch.randn(8192, 1024)
    tile = ref.clone()
    tile[:32, :32] += 0.8  # rel-L2 error 0.009: within tolerance; the element bound still catches it
    check = bench.check_variant(lambda x: tile, [ref], ref, 1e-2, "cpu")
    assert check["rel_err"] < 1e-2 and not check["correct"] and "element" in check["error"]
    assert bench.check_variant(lambda x: x.clone(), [ref], ref, 1e-4, "cpu")["correct"]
    nan = ref.clone()
    nan[5, 5] = float("nan")
    assert bench.check_variant(lambda x: nan, [ref], ref, 1e-2, "cpu")["error"] == "wrong shape or non-finite output"
    changed = bench.check_variant(lambda x: (x.mul_(2.0), ref)[1], [ref.clone()], ref, 1e-4, "cpu")
    assert not changed["correct"] and changed["error"] == "modified its inputs in place"


def test_report_survives_failed_and_partial_kernels():
    results = synthetic_results()
    results["kernels"].append({"name": "broken", "error": "RuntimeError: boom", "variants": {}})
    results["kernels"].append({
        "name": "partial", "bound": "memory", "floor_ms": 0.1, "bytes": 10**9, "flops": 10**8, "intensity": 0.1,
        "variants": {"naive": {"correct": False, "error": "seed 1: relative error 1 over tolerance 0.0001"},
                     "eager": _variant(0.2, 0.1)},
        "speedups": {}, "optimize": {"skipped": "time budget spent"},
    })
    text = report.markdown(results, [])
    assert "| partial |  | memory | FAILED | - | 0.200 |" in text
    assert "- broken: RuntimeError: boom" in text
    assert "- **partial**: not optimized (time budget spent)" in text
