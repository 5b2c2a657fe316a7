"""tiling with EVEN flags: unmasked accesses under ``if EVEN:`` whose launch computes ``EVEN=n % BLOCK == 0`` from the
block's own host constant; blocks one constant sets take equal sizes; a flash kernel's key block is its loop's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ActionError, ACTIONS, applicable, apply_candidate
from mtmc_lsp.optimizer.actions import _common as c
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import TOL_FP32, job, run_jobs  # noqa: E402

H200 = get_profile("h200")
ROOT = Path(__file__).resolve().parents[1]

# Triton's tutorials branch on an EVEN constexpr: every block of the loop is whole when n % BLOCK == 0.
EVEN_SUM = '''import torch
import triton
import triton.language as tl

ENTRY = "row_sum"


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        if EVEN:
            x = tl.load(x_ptr + row * n_cols + cols)
        else:
            x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        acc += x
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def row_sum(x):
    n_rows, n_cols = x.shape
    out = torch.empty(n_rows, device=x.device, dtype=x.dtype)
    BLOCK = 64
    row_sum_kernel[(n_rows,)](x, out, n_cols, BLOCK=BLOCK, EVEN=n_cols % BLOCK == 0)
    return out


def get_inputs(device="cpu", cols=COLS):
    return [torch.randn(5, cols, device=device)]


def reference(x):
    return x.sum(dim=1)
'''


def plan_of(text: str, kernel: str) -> dict:
    analysis = analyze(text)
    return c.tile_plan(analysis, analysis.kernel(kernel), c.parse(text)).params


def test_an_even_flag_from_the_blocks_host_constant_guards_its_unmasked_loads():
    (block,) = plan_of(EVEN_SUM.replace("COLS", "256"), "row_sum_kernel").values()
    assert block.tunable and block.even_flags == ("EVEN",)
    # The flag computed from a literal would not follow a new block size: the unmasked load is refused.
    literal = EVEN_SUM.replace("EVEN=n_cols % BLOCK == 0", "EVEN=n_cols % 64 == 0").replace("COLS", "256")
    (kept,) = plan_of(literal, "row_sum_kernel").values()
    assert not kept.tunable and "no mask" in kept.reason
    # Autotune configs would set BLOCK while the launch's flag reads the host's: refused with the reason.
    analysis = analyze(EVEN_SUM.replace("COLS", "256"))
    with pytest.raises(ActionError, match="EVEN at the launch read the host's block size"):
        ACTIONS["autotune"]._configs(analysis, analysis.kernel("row_sum_kernel"), H200)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_retiled_even_kernels_compute_the_same_whole_or_partial(tmp_path):
    jobs = []
    for cols in (2048, 3000):  # every block whole (EVEN) and a partial last block
        before = EVEN_SUM.replace("COLS", str(cols))
        options = [cand for cand in applicable(analyze(before), "row_sum_kernel", H200) if cand.action == "tiling"]
        assert options, "tiling not offered"
        for cand in options:
            after = apply_candidate(before, cand, H200).new_text
            assert f"BLOCK = {cand.params['BLOCK']}" in after and "EVEN=n_cols % BLOCK == 0" in after
            jobs.append(job(tmp_path, f"even_{cols}:{cand.params['BLOCK']}", before, after, TOL_FP32))
    jobs.append(job(tmp_path, "even:reference", EVEN_SUM.replace("COLS", "3000"), EVEN_SUM.replace("COLS", "3000"),
                    TOL_FP32, reference=True))
    results = run_jobs(jobs, tmp_path)
    assert all(r["ok"] for r in results), results


def flash_kernel_text() -> str:
    """The dev corpus's unfused causal attention after the flash step: one BLOCK sets both tiles, EVEN_N reads it."""
    text = (ROOT / "benchmarks" / "wild" / "dev" / "attn_unfused_causal_strided.py").read_text()
    (cand,) = [cd for cd in applicable(analyze(text), "_pv_kernel", H200)
               if cd.action == "flash_attention" and "tile" not in cd.params]
    return apply_candidate(text, cand, H200).new_text


def test_a_flash_kernels_tiles_are_its_query_block_and_the_block_its_key_loop_steps():
    text = flash_kernel_text()
    assert "    BLOCK = 64\n" in text and "EVEN_N=N_CTX % BLOCK == 0" in text
    params = plan_of(text, "_pv_kernel")
    assert params["BLOCK_M"].tunable and params["BLOCK_N"].tunable and not params["BLOCK_DMODEL"].tunable
    tiles = [cand.params for cand in applicable(analyze(text), "_pv_kernel", H200) if cand.action == "tiling"]
    # One host constant sets both blocks: square tiles only (128 x 64 would have set BLOCK twice).
    assert tiles == [{"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8}]
    new = apply_candidate(text, next(cd for cd in applicable(analyze(text), "_pv_kernel", H200)
                                     if cd.action == "tiling"), H200).new_text
    assert "    BLOCK = 128\n" in new and "EVEN_N=N_CTX % BLOCK == 0, num_warps=8" in new


def test_blocks_set_by_one_constant_cannot_take_different_sizes():
    text = flash_kernel_text()
    analysis = analyze(text)
    with pytest.raises(ActionError, match="set by one host constant"):
        c.set_constexpr(c.parse(text), analysis, analysis.kernel("_pv_kernel"), {"BLOCK_M": 128, "BLOCK_N": 64})


HELPER_PARAM = '''import torch
import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def mm(a, b, BLOCK=32):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    mm_kernel[(triton.cdiv(M, BLOCK), triton.cdiv(N, BLOCK))](a, b, c, M, N, K, BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_K=32)
    return c
'''


def test_a_helper_parameter_passed_as_two_blocks_takes_square_tiles():
    tiles = [cand.params for cand in applicable(analyze(HELPER_PARAM), "mm_kernel", get_profile("h100"))
             if cand.action == "tiling"]
    assert tiles and all(t["BLOCK_M"] == t["BLOCK_N"] for t in tiles)
