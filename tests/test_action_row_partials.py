"""row_partials: a per-row workspace summed over its rows becomes one partial row per run of rows; the column sum
after it (torch's or a kernel's) gets the new row count; refused where the workspace is read any other way;
equivalent in the interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, applicable, apply_candidate
from mtmc_lsp.optimizer.actions import _common as c
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from corpus.kernels import kernel_path  # noqa: E402
from test_actions_semantics import TOL_FP32, job, run_jobs  # noqa: E402

H100 = get_profile("h100")
ROW_PARTIALS = ACTIONS["row_partials"]
TORCH_SUM = kernel_path("norm_backward_partials").read_text()

# LayerNorm backward in the tutorial's first form: dx plus per-row dW / dB terms, then a kernel summing them.
KERNEL_SUM = '''import torch
import triton
import triton.language as tl

ENTRY = "layer_norm_backward"


@triton.jit
def dx_kernel(DX, DY, PDW, PDB, X, W, Mean, Rstd, stride, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    PDW += row * N
    PDB += row * N
    x = tl.load(X + cols, mask=mask, other=0.0)
    dy = tl.load(DY + cols, mask=mask, other=0.0)
    w = tl.load(W + cols, mask=mask, other=0.0)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    wdy = tl.where(mask, w * dy, 0.0)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    tl.store(DX + cols, (wdy - (xhat * c1 + c2)) * rstd, mask=mask)
    tl.store(PDW + cols, dy * xhat, mask=mask)
    tl.store(PDB + cols, dy, mask=mask)


@triton.jit
def dwdb_kernel(PDW, PDB, DW, DB, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc_w = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_b = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        acc_w += tl.load(PDW + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
        acc_b += tl.load(PDB + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
    tl.store(DW + cols, tl.sum(acc_w, axis=0), mask=cols < N)
    tl.store(DB + cols, tl.sum(acc_b, axis=0), mask=cols < N)


def layer_norm_backward(x, dy, w, mean, rstd):
    M, N = x.shape
    dx = torch.empty_like(x)
    partial_dw = torch.empty((M, N), dtype=torch.float32, device=x.device)
    partial_db = torch.empty((M, N), dtype=torch.float32, device=x.device)
    dw = torch.empty((N,), dtype=torch.float32, device=x.device)
    db = torch.empty((N,), dtype=torch.float32, device=x.device)
    dx_kernel[(M,)](dx, dy, partial_dw, partial_db, x, w, mean, rstd, x.stride(0), N,
                    BLOCK_N=triton.next_power_of_2(N))
    dwdb_kernel[(triton.cdiv(N, 16),)](partial_dw, partial_db, dw, db, M, N, BLOCK_M=8, BLOCK_N=16)
    return dx, dw, db


def get_inputs(device="cpu"):
    x = torch.randn(45, 24, device=device)
    return [x, torch.randn(45, 24, device=device), torch.rand(24, device=device) + 0.5, x.mean(-1),
            torch.rsqrt(x.var(-1, unbiased=False) + 1e-5)]


def reference(x, dy, w, mean, rstd):
    xhat = (x - mean[:, None]) * rstd[:, None]
    wdy = w * dy
    c1 = (xhat * wdy).sum(-1, keepdim=True) / x.shape[1]
    c2 = wdy.sum(-1, keepdim=True) / x.shape[1]
    return (wdy - (xhat * c1 + c2)) * rstd[:, None], (dy * xhat).sum(0), dy.sum(0)
'''


def offered(text: str, kernel: str) -> list:
    return [cand for cand in applicable(analyze(text), kernel, H100) if cand.action == "row_partials"]


def why_refused(text: str, kernel: str) -> str:
    analysis = analyze(text)
    with pytest.raises(ActionError) as caught:
        ROW_PARTIALS._plan(c.parse(text), analysis, analysis.kernel(kernel))
    return str(caught.value)


def test_torch_sum_of_the_workspace_keeps_its_host_code():
    (cand, *_) = offered(TORCH_SUM, "rms_bwd_kernel")
    new = apply_candidate(TORCH_SUM, cand, H100).new_text
    assert "dw_rows = torch.empty((triton.cdiv(M, 16), N), dtype=torch.float32" in new
    assert "rms_bwd_kernel[(triton.cdiv(M, 16),)](" in new and "n_rows=M, ROWS_PER_PROGRAM=16)" in new
    assert "return dx, dw_rows.sum(dim=0)" in new
    # pointers moved per row get names of their own; the weight is loaded once, before the row loop
    assert "        dy_ptr_row = dy_ptr + row * stride\n" in new
    assert new.index("    w = tl.load(w_ptr + cols") < new.index("    for row in range(row_start,")
    assert "        dw_rows_acc += dy * xhat\n    tl.store(dw_rows_ptr + tl.program_id(0) * N + cols, dw_rows_acc" in new


def test_a_summing_kernel_gets_the_new_row_count():
    assert {cand.params["ROWS_PER_PROGRAM"] for cand in offered(KERNEL_SUM, "dx_kernel")} == {8, 16, 32}
    new = apply_candidate(KERNEL_SUM, offered(KERNEL_SUM, "dx_kernel")[0], H100).new_text
    assert "dwdb_kernel[(triton.cdiv(N, 16),)](partial_dw, partial_db, dw, db, triton.cdiv(M, 16), N," in new
    assert "    tl.store(PDW + cols + tl.program_id(0) * N, partial_dw_acc, mask=mask)\n" in new
    assert "PDW += row" not in new and "        X_row = X + row * stride\n" in new


@pytest.mark.parametrize("change, why", [
    (("    return dx, dw, db\n", "    return dx, dw, db, partial_dw\n"), "other than summed over its rows"),
    (("        acc_w += tl.load(PDW", "        acc_w = acc_w * 0.5 + tl.load(PDW"), "other than as `acc += tl.load(...)`"),
    (("    tl.store(DW + cols, tl.sum(acc_w, axis=0), mask=cols < N)", "    tl.store(DW + cols, tl.sum(acc_w, axis=0) / M, mask=cols < N)"),
     "uses M other than as a bound"),
    (("    acc_b = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n",
      "    acc_b = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n    acc_b += tl.load(DB + cols)\n"), "loads DB"),
    (("    tl.store(PDB + cols, dy, mask=mask)", "    tl.store(PDB + cols, dy, mask=mask & (row > 0))"), "mask depends on the row"),
    (("    PDB += row * N\n", "    PDB += row * N + row\n"), "is not moved by"),
    (("    mean = tl.load(Mean + row)\n", "    mean = tl.load(Mean + row)\n    tl.store(X + cols, x, mask=mask)\n"), "in place"),
    (("    x = tl.load(X + cols, mask=mask, other=0.0)\n", "    x = tl.load(X + cols, mask=mask, other=0.0)\n    if N > 4:\n        x = x * 2\n"),
     "a loop or a branch"),
    (("    partial_db = torch.empty((M, N), dtype=torch.float32", "    partial_db = torch.empty((M, N), dtype=torch.float16"),
     "dwdb_kernel loads PDB"),  # an fp16 buffer is no workspace (its rows would round): the sum reads it
])
def test_refused_where_the_partial_rows_would_change_a_result(change, why):
    text = KERNEL_SUM.replace(*change)
    assert text != KERNEL_SUM
    assert why in why_refused(text, "dx_kernel")
    assert not offered(text, "dx_kernel")


@pytest.mark.slow
def test_partial_rows_stay_equivalent(tmp_path):
    jobs = []
    rebound = KERNEL_SUM.replace("    c1 = tl.sum(", "    w = tl.load(W + cols, mask=mask, other=0.0) * 2.0\n    c1 = tl.sum(")
    wide = KERNEL_SUM.replace("    row = tl.program_id(0)\n", "    row = tl.program_id(0).to(tl.int64)\n")
    for label, text, kernel in (("torch_sum", TORCH_SUM, "rms_bwd_kernel"), ("kernel_sum", KERNEL_SUM, "dx_kernel"),
                                ("w_rebound", rebound, "dx_kernel"), ("int64_row", wide, "dx_kernel")):
        jobs.append(job(tmp_path, f"{label}:reference", text, text, TOL_FP32, reference=True))
        for cand in offered(text, kernel):
            jobs.append(job(tmp_path, f"{label}:rows{cand.params['ROWS_PER_PROGRAM']}", text,
                            apply_candidate(text, cand, H100).new_text, TOL_FP32))
        split = apply_candidate(text, offered(text, kernel)[0], H100).new_text
        if label == "kernel_sum":  # after split_reduction on the column sum, as the search may order them
            first = apply_candidate(text, next(c for c in applicable(analyze(text), "dwdb_kernel", H100)
                                               if c.action == "split_reduction"), H100).new_text
            both = apply_candidate(first, offered(first, kernel)[0], H100).new_text
            jobs.append(job(tmp_path, f"{label}:split_reduction+rows", text, both, TOL_FP32))
        assert split != text
    results = run_jobs(jobs, tmp_path)
    assert len(results) == 17 and all(r["ok"] for r in results), [r for r in results if not r["ok"]]


def test_every_binding_of_a_name_bound_twice_stays_in_the_loop():
    """``w`` rebound after a row's line reads it: with its first binding moved before the loop, the next row would
    read the value the previous row's second binding left."""
    text = KERNEL_SUM.replace("    c1 = tl.sum(", "    w = tl.load(W + cols, mask=mask, other=0.0) * 2.0\n    c1 = tl.sum(")
    new = apply_candidate(text, offered(text, "dx_kernel")[0], H100).new_text
    loop = new[new.index("    for row in range(row_start,"):new.index("    tl.store(PDW + cols")]
    assert "        w = tl.load(W + cols, mask=mask, other=0.0) * 2.0\n" in loop
    assert "        w = tl.load(W + cols, mask=mask, other=0.0)\n" in loop  # both bindings, in order, every row


def test_refused_when_a_name_the_moved_store_reads_is_rebound():
    text = KERNEL_SUM.replace("    tl.store(PDB + cols, dy, mask=mask)\n", "    mask = cols < N - 1\n    tl.store(PDB + cols, dy, mask=mask)\n")
    assert "mask, which PDW's store reads, is assigned more than once" in why_refused(text, "dx_kernel")


def test_a_stored_value_may_read_a_name_bound_twice():
    """The LayerNorm backward's ``xhat = ...; xhat = tl.where(mask, xhat, 0.0)``: the value is summed in the loop, where
    both bindings stay; only the moved store's address and mask must not be rebound."""
    text = KERNEL_SUM.replace("    wdy = tl.where(mask, w * dy, 0.0)\n",
                              "    wdy = tl.where(mask, w * dy, 0.0)\n    xhat = tl.where(mask, xhat, 0.0)\n")
    assert text != KERNEL_SUM and offered(text, "dx_kernel")


def test_an_int64_row_keeps_its_width():
    """Liger and unsloth write ``tl.program_id(0).to(tl.int64)`` so row offsets of large inputs do not overflow."""
    text = KERNEL_SUM.replace("    row = tl.program_id(0)\n", "    row = tl.program_id(0).to(tl.int64)\n")
    new = apply_candidate(text, offered(text, "dx_kernel")[0], H100).new_text
    assert "    row_start = tl.program_id(0).to(tl.int64) * ROWS_PER_PROGRAM\n" in new
