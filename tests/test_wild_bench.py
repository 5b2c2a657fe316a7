"""benchmarks/wild_bench.py: the structural-step rule, file selection, the harness's reference as torch.compile
gets it, summary/report/merge on recorded numbers, and the CPU smoke run end to end (slow)."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "wild_bench.py"
DEV = ROOT / "benchmarks" / "wild" / "dev"


def _load():
    spec = importlib.util.spec_from_file_location("wild_bench_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wb = _load()


def test_structural_rule():
    assert wb.is_structural({"action": "tiling", "kind": "Tiling"})
    assert wb.is_structural({"action": "single_pass", "kind": "Tiling"})
    assert wb.is_structural({"action": "row_fusion", "kind": "Fusion"})
    assert wb.is_structural({"action": "pipelining", "kind": "Pipelining"})
    assert wb.is_structural({"action": "reordering", "kind": "Reordering"})
    assert not wb.is_structural({"action": "contiguity", "kind": "Reordering"})  # hints only
    for action, kind in (("warps", "Warps"), ("autotune", "Autotune"), ("hoist", "Hoist"), ("name_block", "Prepare")):
        assert not wb.is_structural({"action": action, "kind": kind})


def test_structural_kinds_exist_in_the_engine():
    from mtmc_lsp.optimizer.actions import ACTIONS, KINDS

    assert set(wb.STRUCTURAL_KINDS) <= set(KINDS)
    assert set(wb.HINT_ONLY_ACTIONS) <= set(ACTIONS)


def test_select_files_and_shards():
    everything = wb.select_files("dev", None, None)
    assert len(everything) == len([p for p in DEV.glob("*.py") if not p.name.startswith("_")])
    halves = [wb.select_files("dev", None, f"{i}/2") for i in (1, 2)]
    assert sorted(p.name for h in halves for p in h) == sorted(p.name for p in everything)
    assert not set(halves[0]) & set(halves[1])
    named = wb.select_files("dev", ["red_row_sum_literal", "red_cumsum_test.py"], None)
    assert [p.name for p in named] == ["red_row_sum_literal.py", "red_cumsum_test.py"]
    with pytest.raises(SystemExit):
        wb.select_files("dev", ["no_such_file.py"], None)


def test_heldout_is_refused_without_a_gpu(tmp_path):
    assert wb.main(["--cpu-smoke", "--part", "heldout", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "results.json").exists()


def _harness(path: Path):
    from mtmc_lsp.optimizer.verify.harness import discover_harness

    return discover_harness(path.read_text(), str(path))


@pytest.mark.parametrize("name, knobs", [("red_row_sum_literal.py", {"M": 8, "N": 33}),
                                         ("red_mean_kernelbench.py", {"batch": 2, "d1": 8, "d2": 5})])
def test_reference_as_torch_compile_gets_it(name, knobs):
    """The baseline and inputs built in the bench process give what the file computes: its eager() in the inputs'
    precision where the reference upcasts (red_row_sum_literal sums fp16 rows), else the reference."""
    import bench
    import torch

    path = DEV / name
    harness = _harness(path)
    module = bench.load_module(path)
    fn, why = wb.reference_callable(module, harness, device="cpu")
    assert fn is not None, why
    inputs = wb.make_inputs(module, harness, wb.TIMING_SEED, device="cpu", **knobs)
    again = wb.make_inputs(module, harness, wb.TIMING_SEED, device="cpu", **knobs)
    assert all(torch.equal(a, b) for a, b in zip(inputs, again))  # seeded like the verifier's timing round
    out = fn(*inputs)
    assert out.dtype == inputs[0].dtype
    expected = inputs[0].float().sum(dim=1) if harness.style == "function" else inputs[0].mean(dim=1)
    tol = 1e-2 if out.dtype == torch.float16 else 1e-4
    assert torch.allclose(out.float(), expected, atol=tol, rtol=tol)
    assert wb._agree(out, expected) == (True, pytest.approx(0.0, abs=1e-3))
    assert wb._agree(out, expected + 1.0)[0] is False


def test_test_style_has_no_reference_to_compile():
    import bench

    path = DEV / "red_cumsum_test.py"
    harness = _harness(path)
    fn, why = wb.reference_callable(bench.load_module(path), harness, device="cpu")
    assert fn is None and "test-style" in why


def _record(name: str, naive: float, opt: float, eager: float | None, compiled: float | None, kinds: list[str]) -> dict:
    kept = [{"kernel": "k", "action": kind.lower(), "kind": kind, "structural": wb.is_structural(
        {"action": kind.lower(), "kind": kind})} for kind in kinds]
    final = {"status": "verified", "harness": "function", "naive_ms": naive, "optimized_ms": opt, "eager_ms": eager,
             "x_naive": naive / opt, "x_naive_band": 0.01, "x_eager": eager / opt if eager else None,
             "naive_band_rel": 0.01, "optimized_band_rel": 0.02, "eager_band_rel": 0.01}
    record = {"file": name, "status": "done", "final": final, "loop": {"kept": kept, "wall_s": 10.0, "stopped": "steps"},
              "kernels": [{"kernel": "k", "steps": [], "structural": any(s["structural"] for s in kept), "fused_away": False}],
              "compile": {"compile_ms": compiled, "matches_eager": True} if compiled else {"skipped": "test-style file"}}
    record["structural"] = record["kernels"][0]["structural"]
    if compiled:
        record["x_compile"] = compiled / opt
    return record


def _results(files: list[dict]) -> dict:
    return {"part": "dev", "mode": "gpu", "environment": {"gpu": "NVIDIA H200", "driver": "x", "torch": "t", "triton": "r"},
            "settings": {"steps": 3, "budget_s": 15}, "command": "python benchmarks/wild_bench.py", "files": files,
            "total_wall_s": 1.0}


def test_summary_report_and_merge(tmp_path):
    a = _record("a.py", 4.0, 1.0, 2.0, 1.0, ["Tiling", "Warps"])   # 4x naive, 1x compile, structural
    b = _record("b.py", 2.0, 1.0, 1.0, 2.0, ["Warps"])             # 2x naive, 2x compile, not structural
    c = _record("c.py", 9.0, 1.0, None, None, ["Fusion"])          # test style: no eager, no compile
    pending = {"file": "d.py", "status": "not_run", "error": "run deadline"}
    s = wb.summarize([a, b, c, pending])
    assert s["files"] == 4 and s["files_done"] == 3 and s["not_done"] == ["d.py"]
    assert s["kernels"] == 3 and s["kernels_structural"] == 2
    assert math.isclose(s["geomean_x_naive"], (4 * 2 * 9) ** (1 / 3))
    assert math.isclose(s["geomean_x_compile"], math.sqrt(2)) and s["files_with_compile"] == 2
    assert math.isclose(s["geomean_x_eager"], math.sqrt(2)) and s["files_with_eager"] == 2
    assert s["goals"] == {"structural_share>=0.8": False, "geomean_x_naive>=3": True, "geomean_x_compile>=1": True}
    upcast = {**_record("u.py", 2.0, 1.0, 20.0, 20.0, ["Tiling"]), "upcast_baseline": "float16 -> float32"}
    with_upcast = wb.summarize([a, b, c, upcast])  # 20x over an fp32 reference of fp16 inputs: shown, not counted
    assert with_upcast["upcast_baselines"] == ["u.py"] and with_upcast["files_with_compile"] == 2
    assert math.isclose(with_upcast["geomean_x_compile"], math.sqrt(2))
    assert "upcast baseline, float16 -> float32: not counted" in wb.report_markdown(_results([a, upcast]) | {
        "summary": wb.summarize([a, upcast])})

    first, second = tmp_path / "one", tmp_path / "two"
    wb.write_all(first, _results([a, pending]), final=True)
    finished_d = _record("d.py", 3.0, 1.0, 1.5, 1.5, ["Pipelining"])
    wb.write_all(second, _results([b, c, finished_d]), final=True)
    report = (first / "report.md").read_text()
    assert "| a.py | function |" in report and "Not run (time): d.py" in report
    assert wb.main(["--merge", str(first / "results.json"), str(second / "results.json"), "--out", str(tmp_path / "m")]) == 0
    merged = json.loads((tmp_path / "m" / "results.json").read_text())
    assert [f["file"] for f in merged["files"]] == ["a.py", "b.py", "c.py", "d.py"]
    assert merged["summary"]["files_done"] == 4 and merged["summary"]["not_done"] == []
    assert merged["summary"]["kernels_structural"] == 3
    assert (tmp_path / "m" / "report.md").exists()
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "m" / "speedup.png").stat().st_size > 1000


@pytest.mark.slow
def test_cpu_smoke_two_dev_files(tmp_path):
    """The GPU run's code path under the interpreter: loop, final check, per-kernel structure; no timing."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu-smoke", "--part", "dev", "--budget-s", "20", "--out", str(tmp_path),
         "--files", "red_row_sum_literal.py", "red_cumsum_test.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=400, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["bench"] == "wild" and results["part"] == "dev" and results["mode"] == "cpu-interpreter"
    assert results["structural_rule"]["kinds"] == list(wb.STRUCTURAL_KINDS)
    assert [f["file"] for f in results["files"]] == ["red_row_sum_literal.py", "red_cumsum_test.py"]
    for record in results["files"]:
        assert record["status"] == "done", record
        assert record["final"]["status"] == "verified" and record["final"]["mode"] == "interpreter"
        assert record["final"].get("x_naive") is None  # no speed without a GPU, never estimated
        assert "skipped" in record["compile"]
        loop = record["loop"]
        assert loop["verifications"] >= 1 and loop["wall_s"] <= 20 + 60
        for step in loop["kept"]:
            assert {"kernel", "action", "kind", "structural"} <= set(step)
            assert step["structural"] == wb.is_structural(step)
        assert [k["kernel"] for k in record["kernels"]]  # every kernel of the original file
        assert record["structural"] == any(k["structural"] for k in record["kernels"])
        if record["changed"]:
            assert loop["kept"]
    function_style, test_style = results["files"]
    assert function_style["final"]["harness"] == "function" and test_style["final"]["harness"] == "test"
    assert "reference" in function_style["final"]["compared_against"]
    s = results["summary"]
    assert s["files_done"] == 2 and s["kernels"] == 2 and s["geomean_x_naive"] is None
    assert "| red_row_sum_literal.py |" in (tmp_path / "report.md").read_text()

    # --resume keeps what is done and runs nothing again.
    again = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu-smoke", "--part", "dev", "--resume", "--out", str(tmp_path),
         "--files", "red_row_sum_literal.py", "red_cumsum_test.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert again.returncode == 0 and again.stdout.count("done in an earlier run") == 2, again.stdout + again.stderr
    resumed = json.loads((tmp_path / "results.json").read_text())
    assert resumed["files"] == results["files"] and "warm_up" not in resumed


def test_deadline_leaves_files_for_a_later_run(tmp_path):
    """A run with no time left starts nothing, says which files are left, and still writes its results."""
    assert wb.main(["--cpu-smoke", "--part", "dev", "--deadline-s", "0", "--out", str(tmp_path),
                    "--files", "red_row_sum_literal.py"]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert [f["status"] for f in results["files"]] == ["not_run"]
    assert results["summary"]["not_done"] == ["red_row_sum_literal.py"] and "warm_up" not in results
    assert "Not run (time): red_row_sum_literal.py" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("name, knobs", [("red_row_sum_literal.py", {"M": 8, "N": 33}),
                                         ("red_mean_kernelbench.py", {"batch": 2, "d1": 8, "d2": 5})])
def test_torch_compile_path_on_the_cpu(name, knobs):
    """The GPU run's torch.compile step, with dynamo's eager backend on the CPU: compiled, checked, timed."""
    path = DEV / name
    out = wb.time_torch_compile(path, path.read_text(), timeout_s=120, rounds=2, device="cpu", backend="eager",
                                knobs=knobs)
    assert "error" not in out and "skipped" not in out, out
    assert out["matches_eager"] is True and out["compile_s"] >= 0
    assert out["compile_ms"] > 0 and out["eager_ms"] > 0 and out["eager_band_rel"] is not None
    test_file = DEV / "red_cumsum_test.py"
    assert "test-style" in wb.time_torch_compile(test_file, test_file.read_text(), 60, 2, device="cpu")["skipped"]


def test_an_enabling_step_counts_as_structural_only_with_a_faster_step_after_it(tmp_path):
    text = (ROOT / "benchmarks" / "suite" / "cross_entropy.py").read_text()
    fusion = {"kernel": "row_max_kernel", "action": "row_fusion", "kind": "Fusion", "structural": True, "enabling": True}
    single = {"kernel": "row_max_kernel", "action": "single_pass", "kind": "Tiling", "structural": True, "enabling": False}
    path = tmp_path / "cross_entropy.py"
    alone = {r["kernel"]: r for r in wb.structural_kernels(text, text, [fusion], path)}
    assert not alone["row_max_kernel"]["structural"] and "enabling" in alone["row_max_kernel"]["steps"][0]
    followed = {r["kernel"]: r for r in wb.structural_kernels(text, text, [fusion, single], path)}
    assert followed["row_max_kernel"]["structural"]


def test_the_kernel_a_fusion_step_rewrites_counts_as_structural(tmp_path):
    """flash_attention is offered on the scores kernel but writes the flash kernel into the P @ V kernel."""
    name = "attn_two_kernels_kernelbench.py"
    text = (DEV / name).read_text()
    flash = {"kernel": "scores_softmax_kernel", "action": "flash_attention", "kind": "Fusion", "structural": True,
             "params": {"scores": "scores_softmax_kernel", "softmax": "", "pv": "pv_kernel"}}
    final = text.replace("def scores_softmax_kernel(", "def _gone(")  # the scores kernel is removed
    rows = {r["kernel"]: r for r in wb.structural_kernels(text, final, [flash], tmp_path / name)}
    assert rows["pv_kernel"]["structural"] and not rows["pv_kernel"]["fused_away"]
    assert rows["scores_softmax_kernel"]["structural"]
    warps = {"kernel": "scores_softmax_kernel", "action": "warps", "kind": "Warps", "structural": False,
             "params": {"num_warps": 8}}
    assert not {r["kernel"]: r for r in wb.structural_kernels(text, text, [warps], tmp_path / name)}["pv_kernel"]["structural"]


def test_a_failed_final_check_keeps_the_longest_run_of_first_steps_that_passes(monkeypatch):
    """H200, session 13: a file whose 9.9x steps failed the final recheck counted at 1.0x; a user accepts steps one by
    one, so only the steps the check rejects are lost."""
    from types import SimpleNamespace

    checked = []

    def final_check(text, original, path, target, gpu, stop_at=None):
        checked.append(text)
        return {"status": "verified" if text in ("s1", "s2") else "incorrect"}

    monkeypatch.setattr(wb, "final_check", final_check)
    args = SimpleNamespace(stop_at=None)
    count, check = wb.accepted_prefix(["s1", "s2", "s3"], "orig", Path("f.py"), None, True, args)
    assert (count, check["status"], checked) == (2, "verified", ["s2"])
    checked.clear()
    assert wb.accepted_prefix(["bad1", "bad2", "bad3", "bad4"], "orig", Path("f.py"), None, True, args) == (0, None)
    assert checked == ["bad3", "bad2"]  # at most PREFIX_TRIES shorter runs are checked


def test_the_caller_names_the_engine_where_git_metadata_is_stale(monkeypatch):
    """The GPU machine's copy of the tree carries stale git metadata: its reports named an engine commit sessions old."""
    monkeypatch.setenv("MTMC_ENGINE", "c815560")
    assert wb.bench.engine_version() == "c815560 (named by the caller)"
    monkeypatch.delenv("MTMC_ENGINE")
    assert "named by the caller" not in wb.bench.engine_version()
