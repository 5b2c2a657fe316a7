"""Every harness style verifies in the interpreter as written: real argument types for the target
compile, lower-precision references, autograd tests, every autotune config, and test-style timing
by replaying the recorded launches (the GPU timing path driven on the CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtmc_lsp.optimizer.verify import VerifyOptions, WorkerPool, verify_file

from test_compile_signature import XENT
from test_verify_gpu_paths import report_of, run_gpu_job

pytestmark = pytest.mark.slow

ADD = '''import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 32}, num_warps=2), triton.Config({"BLOCK": 64}, num_warps=4)],
                 key=["n"])
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    out = tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, out, mask=m)


def add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    return out


def get_inputs(device="cuda", n=1000):
    return [torch.randn(n, device=device), torch.randn(n, device=device)]


def reference(x, y):
    return x + y
'''

SCALE = '''import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 3.0, mask=m)


def scale(x):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out


def get_inputs(device="cuda", n=4096):
    return [torch.randn(n, device=device)]


def reference(x):
    return (x.half() * 3).float()  # computed in fp16, returned as fp32
'''

# One copy, shared with benchmarks/verify_gpu.py.
AUTOGRAD_TEST = (Path(__file__).resolve().parent / "corpus" / "styles" / "autograd_double.py").read_text()


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool("interpreter")
    yield p
    p.close()


def verify(pool, new, old=None, **opts):
    opts.setdefault("compile_for_target", False)
    return verify_file(new, old, "k.py", "h100", VerifyOptions(pool=pool, **opts))


def test_an_int64_target_index_verifies_and_the_target_compile_uses_the_launch_types(pool):
    text = XENT.replace("dtype=torch.float16)", "dtype=torch.float32)")
    report = verify(pool, text, compile_for_target=True)
    assert report.status == "verified", report.summary
    compiled = report.check("compile").details["target"]["reports"]
    assert compiled and compiled[0]["status"] == "ok" and compiled[0]["signature"]["target_ptr"] == "*i64"
    assert report.raw["launches"]["xent_kernel"]["types"]["target_ptr"] == "*i64"
    assert set(report.phases) >= {"import", "compile", "correctness", "target_compile", "total"}


def test_a_reference_computed_in_lower_precision_does_not_fail_a_correct_kernel(pool):
    report = verify(pool, SCALE)
    assert report.status == "verified", report.summary
    assert report.raw["runtime"]["precision"] == "float16"
    wrong = SCALE.replace("* 3.0, mask=m)", "* 3.0 + (offs == 37), mask=m)")
    report = verify(pool, wrong)
    assert report.status == "incorrect" and report.mismatch.index == [37] and report.mismatch.atol == 1e-2


def test_autograd_tests_run_as_written(pool):
    report = verify(pool, AUTOGRAD_TEST, AUTOGRAD_TEST)
    assert report.status == "verified", report.summary
    wrong = AUTOGRAD_TEST.replace("return launch(grad.contiguous(), 2.0)", "return launch(grad.contiguous(), 3.0)")
    report = verify(pool, wrong, AUTOGRAD_TEST)
    assert report.status == "incorrect" and report.mismatch.output == "output[1]", report.summary


def test_every_autotune_config_runs_in_the_interpreter(pool):
    report = verify(pool, ADD, compile_for_target=True)
    assert report.status == "verified", report.summary
    configs = [t["autotune_config"]["add_kernel"] for t in report.raw["trials"] if t["kind"] == "config"]
    assert len(configs) == 1 and configs[0].startswith("BLOCK: 64")
    assert report.raw["runtime"]["autotune_configs"] == {"add_kernel": 2}
    wrong_second = ADD.replace("    tl.store(out_ptr + offs, out, mask=m)",
                               "    if BLOCK == 64:\n        out = out + 1.0\n    tl.store(out_ptr + offs, out, mask=m)")
    report = verify(pool, wrong_second)
    assert report.status == "incorrect", report.summary
    assert report.mismatch.trial == "config"


TEST_STYLE = '''import torch
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
    torch.testing.assert_close(out, x + y)
    return out
'''


def test_test_style_files_are_timed_by_replaying_the_recorded_launches():
    # The old test spends 0.1 s outside the kernel: replaying only the kernel's launches leaves that
    # out, timing the whole test does not.
    slow = TEST_STYLE.replace("    out = add(x, y)\n", "    out = add(x, y)\n    time.sleep(0.1)\n").replace(
        "import torch\n", "import time\n\nimport torch\n", 1)
    result = run_gpu_job(TEST_STYLE, slow, adaptive_timing=False)
    assert "test_add: 1 -> 1 launches of add_kernel replayed" == result["speed"]["method"]
    report = report_of(result, TEST_STYLE)
    assert report.status == "verified" and report.speed.baseline == "previous", report.summary
    assert report.speed.speedup < 3 and "timed: test_add: 1 -> 1 launches" in report.check("speed").message
    whole = run_gpu_job(TEST_STYLE, slow, adaptive_timing=False, test_timing="test")
    assert whole["speed"]["method"] == "test_add: whole test"
    assert report_of(whole, TEST_STYLE).speed.speedup > 3


def test_the_worker_keeps_the_previous_version_and_expected_outputs_and_still_catches_faults(pool):
    from pathlib import Path

    faults = Path(__file__).resolve().parent / "corpus" / "faults"
    base = (faults / "base.py").read_text()
    first = verify(pool, base, base)
    again = verify(pool, base, base)
    assert first.status == again.status == "verified"
    assert again.raw["runtime"].get("reused") == ["old"]  # imported once, kernels compiled once
    assert all(set(t.get("expected_reused", [])) == {"reference", "old"} for t in again.raw["trials"])
    for name, kind in (("wrong_element", "values"), ("pointer_cache", "values"), ("partial_write", "nonfinite")):
        report = verify(pool, (faults / f"{name}.py").read_text(), base)
        assert report.status == "incorrect" and report.mismatch.kind == kind, (name, report.summary)
    legacy = verify(pool, base, base, reuse_results=False)
    assert legacy.status == "verified" and "reused" not in legacy.raw["runtime"]
    assert not any(t.get("expected_reused") for t in legacy.raw["trials"])


def test_timing_windows_are_sized_by_the_kernel_time():
    base = (__import__("pathlib").Path(__file__).resolve().parent / "corpus" / "faults" / "base.py").read_text()
    result = run_gpu_job(base, base, input_kwargs={"n": 40}, recheck_speedup_above=1e9)
    sizing = result["speed"]["sizing"]
    # About 100 runs of the slowest implementation per window, within [20, 100] ms (the interpreter is
    # slow, so here it is usually the 100 ms cap; a 20 us GPU kernel gets the 20 ms floor).
    estimate = sizing["estimate_ms"]
    assert sizing["rep_ms"] == int(min(100, max(20, 100 * estimate)))
    assert sizing["warmup_ms"] == int(min(25, max(5, 25 * estimate)))
    assert sizing["rounds"] >= sizing["asked_rounds"] == 3
    fixed = run_gpu_job(base, base, input_kwargs={"n": 40}, recheck_speedup_above=1e9, adaptive_timing=False)
    # No GPU here: timed the synchronized way, and the sizing says so.
    assert fixed["speed"]["sizing"] == {"warmup_ms": 25, "rep_ms": 100, "asked_rounds": 3, "rounds": 3,
                                        "method": "synchronized"}


def test_autotune_configs_are_compiled_ahead_once_per_kernel_in_parallel():
    # The GPU path's plumbing with a stand-in kernel (compiling for real needs a GPU driver; Triton's
    # AsyncCompileMode then sends each warmup's compile to the thread pool).
    from mtmc_lsp.optimizer.verify.runtime import launches

    class Config:
        def __init__(self, block):
            self.block = block

        def all_kwargs(self):
            return {"BLOCK": self.block}

    calls = []

    class Kernel:
        def run(self, *args, grid, warmup, **kwargs):
            calls.append((args, grid, warmup, kwargs))

    class Tuner:
        arg_names = ["x", "n"]
        configs = [Config(32), Config(64), Config(128)]
        fn = Kernel()

        def prune_configs(self, kwargs):
            return self.configs[:2]  # what the autotuner would benchmark

    launches.PARALLEL_COMPILE.enabled, launches.PARALLEL_COMPILE.log[:] = True, []
    try:
        tuner = Tuner()
        launches._compile_configs_ahead(tuner, ("x", 7), {"grid": (4,), "warmup": False, "num_warps": 4})
        launches._compile_configs_ahead(tuner, ("x", 7), {"grid": (4,), "warmup": False, "num_warps": 4})
    finally:
        launches.PARALLEL_COMPILE.enabled = False
    assert [c[3]["BLOCK"] for c in calls] == [32, 64]  # the pruned configs, once
    assert all(c[0] == ("x", 7) and c[1] == (4,) and c[2] is True and c[3]["num_warps"] == 4 for c in calls)
    assert launches.PARALLEL_COMPILE.log[0]["configs"] == 2 and tuner.nargs is None


def test_test_style_files_run_every_autotune_config_too(pool):
    tested = ADD.split("def get_inputs")[0] + '''def test_add(device="cpu"):
    x, y = torch.randn(300, device=device), torch.randn(300, device=device)
    return add(x, y)
'''
    report = verify(pool, tested, tested)
    assert report.status == "verified", report.summary
    assert [t["kind"] for t in report.raw["trials"]].count("config") == 1
    wrong_second = tested.replace("    tl.store(out_ptr + offs, out, mask=m)",
                                  "    if BLOCK == 64:\n        out = out + 1.0\n    tl.store(out_ptr + offs, out, mask=m)")
    report = verify(pool, wrong_second, tested)
    assert report.status == "incorrect" and report.mismatch.trial == "config", report.summary
    assert "autotune config add_kernel BLOCK: 64, num_warps: 4" in report.summary
