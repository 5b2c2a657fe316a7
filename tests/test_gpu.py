"""The GPU paths, run where a CUDA GPU is (``pytest -m gpu``); skipped elsewhere.

CI has no GPU: these run on the H200 with the benchmarks (docs/benchmarks.md), whose committed
results say more. Each test is the smallest real check of one GPU path: timing, faults, compile.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
try:  # the GPU machine runs the checkout uninstalled: map it like the benchmarks do
    import mtmc_lsp.optimizer  # noqa: F401
except ModuleNotFoundError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import _bootstrap  # noqa: F401

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "mtmc_lsp" / "examples"
FAULTS = ROOT / "tests" / "corpus" / "faults"


def _verify(new_text: str, old_text: str | None, **options):
    from mtmc_lsp.optimizer.verify import VerifyOptions, verify_file

    return verify_file(new_text, old_text, target="", options=VerifyOptions(seeds=2, **options))


def test_a_tiling_step_is_timed_on_the_gpu_with_its_noise():
    from mtmc_lsp.optimizer.actions import applicable, apply_candidate
    from mtmc_lsp.optimizer.analysis import analyze
    from mtmc_lsp.optimizer.hardware import resolve_target

    text = (EXAMPLES / "matmul.py").read_text()
    target = resolve_target("")
    analysis = analyze(text)
    tiling = next(c for c in applicable(analysis, analysis.kernel("matmul_kernel"), target) if c.action == "tiling")
    new_text = apply_candidate(text, tiling, target).new_text
    report = _verify(new_text, text, input_kwargs={"size": 4096})  # big enough to fill the GPU
    assert report.mode == "gpu" and report.status == "verified", report.summary
    assert report.speed is not None and report.speed.speedup > 1.5, report.summary  # 32x32 tiles -> 128x128+


@pytest.mark.parametrize("fault", ["wrong_element", "partial_write", "pointer_cache", "mutate_input"])
def test_planted_faults_are_caught_on_the_gpu(fault):
    base = (FAULTS / "base.py").read_text()
    report = _verify((FAULTS / f"{fault}.py").read_text(), base)
    assert report.status != "passed", report.summary


def test_offline_compile_matches_the_driver():
    """Registers and shared memory from the CPU-side compile equal what the driver loads."""
    import triton

    from mtmc_lsp.optimizer.compile import compile_kernel
    from mtmc_lsp.optimizer.hardware import resolve_target

    path = ROOT / "tests" / "corpus" / "realworld" / "vector_add.py"
    text = path.read_text()
    offline = compile_kernel(text, "add_kernel", {"BLOCK_SIZE": 1024}, resolve_target(""), num_warps=4,
                             num_stages=3, cache_dir=None)
    assert offline.status == "ok", offline.error
    spec = importlib.util.spec_from_file_location("vector_add_under_test", path)  # triton reads the source file
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = torch.randn(4096, device="cuda")
    compiled = module.add_kernel.warmup(x, x, x, 4096, BLOCK_SIZE=1024, grid=(4,), num_warps=4, num_stages=3)
    compiled._init_handles()
    assert compiled.n_regs == offline.registers
    assert compiled.metadata.shared == offline.shared_bytes
    assert triton.__version__
