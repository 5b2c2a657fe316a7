"""single_pass: the row-sized block comes with warps for its width, and a positional block is replaced in place."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import applicable, apply_candidate
from mtmc_lsp.optimizer.actions.single_pass import warps_for_row
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import TOL_FP32, job, run_jobs  # noqa: E402

H100 = get_profile("h100")

# A log-softmax written the way people first write it: three passes over the row, one warp.
LOG_SOFTMAX = '''import torch
import triton
import triton.language as tl

ENTRY = "log_softmax"


@triton.jit
def log_softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        m = tl.maximum(m, tl.max(x, axis=0))
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        s += tl.sum(tl.exp(x - m), axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        tl.store(y_ptr + row * n_cols + cols, x - m - tl.log(s), mask=cols < n_cols)


def log_softmax(x):
    y = torch.empty_like(x)
    log_softmax_kernel[(x.shape[0],)](x, y, x.shape[1], 64, num_warps=1)
    return y


def get_inputs(device="cpu"):
    return [torch.randn(5, 300, device=device)]


def reference(x):
    return torch.log_softmax(x, dim=1)
'''


def single_pass(text: str, kernel: str):
    return next(c for c in applicable(analyze(text), kernel, H100) if c.action == "single_pass")


@pytest.mark.parametrize("width, warps", [(128, 4), (1000, 4), (2048, 8), (4096, 16), (32768, 16)])
def test_row_width_sets_the_warps(width, warps):
    import triton

    assert eval(warps_for_row("n"), {"triton": triton, "n": width}) == warps


def test_positional_block_and_one_warp_are_replaced():
    new = apply_candidate(LOG_SOFTMAX, single_pass(LOG_SOFTMAX, "log_softmax_kernel"), H100).new_text
    assert ("log_softmax_kernel[(x.shape[0],)](x, y, x.shape[1], triton.next_power_of_2(x.shape[1]), "
            "num_warps=min(16, max(4, triton.next_power_of_2(x.shape[1]) // 256)))") in new
    assert "num_warps=1" not in new
    assert new.count("tl.load(") == 1


def test_host_warps_constant_is_replaced_and_dropped():
    text = LOG_SOFTMAX.replace("    log_softmax_kernel[(x.shape[0],)](x, y, x.shape[1], 64, num_warps=1)",
                               "    warps = 2\n    log_softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=64, num_warps=warps)")
    new = apply_candidate(text, single_pass(text, "log_softmax_kernel"), H100).new_text
    assert "warps = 2" not in new and "num_warps=min(16" in new


@pytest.mark.slow
def test_single_pass_with_warps_stays_equivalent(tmp_path):
    new = apply_candidate(LOG_SOFTMAX, single_pass(LOG_SOFTMAX, "log_softmax_kernel"), H100).new_text
    results = run_jobs([job(tmp_path, "log_softmax:reference", LOG_SOFTMAX, LOG_SOFTMAX, TOL_FP32, reference=True),
                        job(tmp_path, "log_softmax:single_pass", LOG_SOFTMAX, new, TOL_FP32)], tmp_path)
    assert all(r["ok"] for r in results), results
