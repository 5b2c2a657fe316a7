"""The benchmark suite and runner: every naive kernel matches its reference under the Triton interpreter,
the harness is complete, GPU sizes overflow the L2, and the whole GPU pipeline runs on the CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "benchmarks" / "suite"
BENCH = ROOT / "benchmarks" / "bench.py"
H200_L2_BYTES = 60 * 1024 * 1024
# The op classes issue 7 asks the suite to cover.
REQUIRED = {"silu_mul_add", "row_sum", "col_sum", "softmax", "layer_norm", "rms_norm", "cross_entropy", "matmul",
            "matmul_transposed", "linear_gelu", "bmm", "attention"}
_suite_spec = importlib.util.spec_from_file_location("benchmark_suite", SUITE / "__init__.py")
_suite = importlib.util.module_from_spec(_suite_spec)
_suite_spec.loader.exec_module(_suite)
SUITE_FILES = list(_suite.suite_files().values())  # the matmul is the bundled example's file


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"suite_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(args: list[str], timeout: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, str(BENCH), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_suite_covers_the_op_classes():
    assert REQUIRED <= {p.stem for p in SUITE_FILES}


@pytest.mark.parametrize("path", SUITE_FILES, ids=lambda p: p.stem)
def test_harness_is_complete_and_gpu_sizes_overflow_l2(path):
    module = _load(path)
    for name in (path.stem, "get_inputs", "reference", "eager", "roofline_cost"):
        assert callable(getattr(module, name, None)), f"{path.name} lacks {name}()"
    assert isinstance(getattr(module, "OP_CLASS", None), str)
    # Meta tensors: the GPU sizes without allocating them.
    gpu = module.roofline_cost(*module.get_inputs(device="meta"))
    assert gpu["bytes"] >= 4 * H200_L2_BYTES, f"{path.stem}: {gpu['bytes'] / 1e6:.0f} MB fits in a few L2s"
    assert gpu["flops"] > 0
    cpu_inputs = module.get_inputs(device="cpu")
    assert all(x.numel() <= 100_000 for x in cpu_inputs), "interpreter sizes must stay tiny"


@pytest.mark.slow
def test_cpu_smoke_every_naive_kernel_matches_its_reference(tmp_path):
    proc = _run(["--cpu-smoke", "--out", str(tmp_path)], timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["mode"] == "cpu-smoke" and results["ok"]
    assert {k["name"] for k in results["kernels"]} == {p.stem for p in SUITE_FILES}
    for kernel in results["kernels"]:
        assert kernel["ok"], kernel
        assert kernel["rel_err"]["naive"] <= kernel["tolerance"]


def test_cpu_smoke_reports_a_wrong_kernel(tmp_path):
    broken = tmp_path / "suite"
    broken.mkdir()
    text = (SUITE / "row_sum.py").read_text().replace("total += tl.sum(x, axis=0)", "total += tl.max(x, axis=0)")
    (broken / "row_sum.py").write_text(text)
    proc = _run(["--cpu-smoke", "--suite", str(broken), "--out", str(tmp_path / "out")], timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert not results["ok"] and "naive" in results["kernels"][0]["error"]


def test_cpu_smoke_refuses_after_triton_was_imported(tmp_path):
    code = ("import sys, triton; sys.path.insert(0, 'benchmarks'); import bench; "
            f"sys.exit(bench.main(['--cpu-smoke', '--kernels', 'row_sum', '--out', r'{tmp_path}']))")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "fresh process" in proc.stderr


@pytest.mark.slow
def test_whole_pipeline_on_cpu_optimizes_checks_times_and_reports(tmp_path):
    """The GPU code path (optimize loop, correctness, interleaved timing, floor, report) under the interpreter."""
    proc = _run(["--device", "cpu", "--kernels", "softmax", "matmul", "--steps", "2", "--rounds", "2",
                 "--rep-ms", "5", "--warmup-ms", "1", "--no-compile", "--out", str(tmp_path)], timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["mode"] == "cpu-interpreter"
    assert results["ceilings"]["copy_gbs"] > 0 and results["ceilings"]["matmul_tflops"] > 0
    for kernel in results["kernels"]:
        assert "error" not in kernel, kernel.get("traceback")
        variants = kernel["variants"]
        for name in ("naive", "mtmc", "eager"):
            assert variants[name]["correct"], (kernel["name"], name, variants[name])
            assert variants[name]["ms"] > 0 and len(variants[name]["ms_rounds"]) == 2
        assert kernel["floor_ms"] > 0 and kernel["bytes"] > 0 and kernel["flops"] > 0
        optimize = kernel["optimize"]
        if results["optimizer"]["method"] != "none":
            assert optimize["verifications"] >= 1 and optimize["wall_s"] > 0, optimize
        assert (tmp_path / "variants" / kernel["name"] / f"{kernel['name']}.py").is_file()
    assert results["summary"]["timed"] == 2
    assert (tmp_path / "report.md").is_file()


def test_mtmc_bench_command_is_registered():
    from mtmc_lsp import cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "--help"])
    assert exit_info.value.code == 0


def test_libcst_is_unpacked_from_a_wheel_when_missing(tmp_path):
    """The GPU machine has no libcst: the runner unpacks a carried wheel instead of needing pip."""
    import zipfile

    wheel = tmp_path / "wheels" / "libcst-0.0-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("libcst/__init__.py", "__version__ = '0.0-test'\n")
    (tmp_path / "wheels" / "libcst-0.0-cp27-cp27m-win32.whl").write_bytes(b"not for this Python")
    code = ("import sys, json; sys.path.insert(0, 'benchmarks'); import bench; from pathlib import Path; "
            f"print(json.dumps([bench.libcst_status(None), bench.libcst_status(Path(r'{wheel.parent}'))]))")
    # -S: no site-packages, so the real libcst of the test environment is out of reach.
    proc = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    missing, unpacked = json.loads(proc.stdout.strip().splitlines()[-1])
    assert missing["available"] is False and "libcst" in missing["error"]
    assert unpacked == {"available": True, "version": "0.0-test", "source": "unpacked from libcst-0.0-py3-none-any.whl"}
