"""row_fusion: a per-row statistics kernel and the kernel that reads them become one (then single_pass reads the row once)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mtmc_lsp.optimizer.actions import ActionError, applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import TOL_FP32, job, run_jobs  # noqa: E402

H100 = get_profile("h100")
CORPUS = Path(__file__).resolve().parent / "corpus" / "kernels"

SOFTMAX = (CORPUS / "softmax_two_kernels.py").read_text()  # the corpus kernel, also run by test_actions_semantics

# Layer norm whose mean and rstd are also returned (kept for backward): their stores stay.
LAYER_NORM = '''import torch
import triton
import triton.language as tl

ENTRY = "layer_norm"


@triton.jit
def ln_stats_kernel(x_ptr, mean_ptr, rstd_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.sum(tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0), axis=0)
    mean = acc / n_cols
    var = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        d = tl.where(cols < n_cols, x - mean, 0.0)
        var += tl.sum(d * d, axis=0)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(var / n_cols + eps))


@triton.jit
def ln_apply_kernel(x_ptr, mean_ptr, rstd_ptr, w_ptr, b_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        tl.store(y_ptr + row * n_cols + cols, (x - mean) * rstd * w + b, mask=mask)


def layer_norm(x, w, b):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(n_rows, dtype=torch.float32)
    rstd = torch.empty(n_rows, dtype=torch.float32)
    ln_stats_kernel[(n_rows,)](x, mean, rstd, n_cols, 1e-5, BLOCK=32)
    ln_apply_kernel[(n_rows,)](x, mean, rstd, w, b, y, n_cols, BLOCK=32)
    return torch.cat([y, mean[:, None], rstd[:, None]], dim=1)  # mean and rstd kept (as for a backward pass)


def get_inputs(device="cpu"):
    return [torch.randn(5, 100, device=device), torch.randn(100, device=device), torch.randn(100, device=device)]


def reference(x, w, b):
    mean = x.mean(dim=1)
    rstd = 1.0 / torch.sqrt(x.var(dim=1, unbiased=False) + 1e-5)
    return torch.cat([torch.nn.functional.layer_norm(x, (x.shape[1],), w, b, 1e-5), mean[:, None], rstd[:, None]], dim=1)
'''


def step(text: str, kernel: str, action: str, **params) -> str:
    cand = next(c for c in applicable(analyze(text), kernel, H100) if c.action == action and all(c.params.get(k) == v for k, v in params.items()))
    return apply_candidate(text, cand, H100).new_text


def test_softmax_becomes_one_kernel_then_one_read():
    fused = step(SOFTMAX, "softmax_stats_kernel", "row_fusion")
    assert "softmax_normalize_kernel" not in fused and "row_max = torch.empty" not in fused
    assert "softmax_stats_kernel[(n_rows,)](x, n_cols, x.stride(0), out, BLOCK_SIZE=64)" in fused
    assert "tl.exp(x - m) / (denom).to(tl.float32)" in fused  # an inline load of a statistic becomes its value
    single = step(fused, "softmax_stats_kernel", "single_pass")
    assert "for start" not in single and "num_warps=min(16" in single


def test_statistics_the_host_returns_keep_their_stores():
    fused = step(LAYER_NORM, "ln_stats_kernel", "row_fusion")
    assert "tl.store(mean_ptr + row, mean)" in fused and "ln_apply_kernel[" not in fused
    assert "ln_stats_kernel[(n_rows,)](x, mean, rstd, n_cols, 1e-5, w, b, y, BLOCK=32)" in fused


@pytest.mark.parametrize("change, why", [
    (("m = tl.load(m_ptr + pid)", "m = tl.load(m_ptr + pid + 1)"), "another row's statistic"),
    (("    row_ptr = x_ptr + row * row_stride\n", "    x_ptr += row * row_stride\n    row_ptr = x_ptr\n"), "the producer moves a shared pointer"),
    (("softmax_normalize_kernel[(n_rows,)]", "softmax_normalize_kernel[(n_rows, 1)]"), "different grids"),
    (("    softmax_normalize_kernel[", "    out.zero_()\n    softmax_normalize_kernel["), "not back to back"),
    (("    m = tl.load(m_ptr + pid)\n", "    m = tl.load(m_ptr + pid)\n    m2 = tl.load(m_ptr + pid)\n"), "read twice"),
    (("    row_ptr = x_ptr + row * row_stride\n", "    if row >= 4:\n        return\n    row_ptr = x_ptr + row * row_stride\n"),
     "the producer returns early"),
])
def test_refused_when_not_the_same(change, why):
    text = SOFTMAX.replace(*change)
    assert text != SOFTMAX, why
    assert not [c for c in applicable(analyze(text), "softmax_stats_kernel", H100) if c.action == "row_fusion"], why


def test_stale_candidate_is_refused():
    cand = next(c for c in applicable(analyze(SOFTMAX), "softmax_stats_kernel", H100) if c.action == "row_fusion")
    with pytest.raises(ActionError):
        apply_candidate(SOFTMAX.replace("m = tl.load(m_ptr + pid)", "m = tl.load(m_ptr + pid + 1)"), cand, H100)


@pytest.mark.slow
def test_row_fusion_stays_equivalent(tmp_path):
    jobs = []
    for name, text, kernel in (("softmax", SOFTMAX, "softmax_stats_kernel"), ("layer_norm", LAYER_NORM, "ln_stats_kernel")):
        fused = step(text, kernel, "row_fusion")
        single = step(fused, kernel, "single_pass")
        jobs += [job(tmp_path, f"{name}:reference", text, text, TOL_FP32, reference=True),
                 job(tmp_path, f"{name}:row_fusion", text, fused, TOL_FP32),
                 job(tmp_path, f"{name}:row_fusion+single_pass", text, single, TOL_FP32)]
    results = run_jobs(jobs, tmp_path)
    assert all(r["ok"] for r in results), results
