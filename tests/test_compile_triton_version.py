"""benchmarks/compile_triton_version.py's step chains and configs, and the compile worker's def line on Triton 3.6."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

from mtmc_lsp.optimizer.hardware import get_profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import compile_triton_version as ctv  # noqa: E402

H200 = get_profile("h200")
LOG_SOFTMAX = (ROOT / "benchmarks" / "wild" / "dev" / "sm_log_softmax_kernelbench.py").read_text()


def test_versions_chain_the_listed_actions_only():
    one = ctv.versions(LOG_SOFTMAX, {"rows_per_program"}, H200, depth=1)
    assert [chain for chain, _ in one] == ["", "rows_per_program(log_softmax_kernel; TILE=4096)",
                                           "rows_per_program(log_softmax_kernel; TILE=8192)"]
    two = [chain for chain, _ in ctv.versions(LOG_SOFTMAX, {"rows_per_program", "single_pass"}, H200, depth=2)]
    assert "single_pass(log_softmax_kernel; ) + rows_per_program(log_softmax_kernel; TILE=4096)" in two
    assert not any("tiling" in chain or "warps" in chain for chain in two)


def test_run_time_constexprs_get_each_fill_value_unless_set():
    after = dict(ctv.versions(LOG_SOFTMAX, {"rows_per_program"}, H200, depth=1))["rows_per_program(log_softmax_kernel; TILE=4096)"]
    jobs = ctv.jobs_for(after, H200, [2, 16], {})
    assert [job.constexprs for job in jobs] == [{"BLOCK_SIZE": 256, "BLOCK_M": 2}, {"BLOCK_SIZE": 256, "BLOCK_M": 16}]
    assert [job.constexprs for job in ctv.jobs_for(after, H200, [2, 16], {"BLOCK_M": 8})] == [{"BLOCK_SIZE": 256, "BLOCK_M": 8}]
    assert [job.constexprs for job in ctv.jobs_for(LOG_SOFTMAX, H200, [2, 16], {})] == [{"BLOCK_SIZE": 256}]  # all known


def test_worker_finds_the_def_line_without_def_file_line_number():
    spec = importlib.util.spec_from_file_location("mtmc_worker_probe", ROOT / "optimizer" / "compile" / "worker.py")
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    raw = ["@triton.autotune(configs=[], key=[])\n", "@triton.jit\n", "def k(x_ptr):\n", "    pass\n"]
    # Triton 3.6's JITFunction: the first decorator's line and the raw lines, no def_file_line_number
    # (reading it crashed the worker and failed every later config of the file).
    assert worker._def_line(SimpleNamespace(starting_line_number=10, raw_src=raw)) == 12
    assert worker._def_line(SimpleNamespace(def_file_line_number=7, starting_line_number=5, raw_src=raw)) == 7
    assert worker._def_line(SimpleNamespace()) is None


def test_a_worker_interpreter_has_its_own_cache_entries():
    """Results compiled by another venv's Triton (``python=``) never answer for this one's, or the reverse."""
    from mtmc_lsp.optimizer.compile.compiler import CompileJob, _cache_key

    job, target = CompileJob("k", {"BLOCK": 64}), get_profile("h100")
    keys = {_cache_key("text", job, {}, {}, {}, target, {}, python) for python in (None, "/venvs/triton36/bin/python")}
    assert len(keys) == 2
    assert _cache_key("text", job, {}, {}, {}, target, {}) == _cache_key("text", job, {}, {}, {}, target, {}, None)
