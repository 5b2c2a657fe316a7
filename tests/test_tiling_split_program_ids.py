"""tiling over a flat program id split in two (``pid // num_pid_n``, ``pid % num_pid_n``): the block of one factor
changes while unmasked reads indexed by the other factor stay in bounds (vLLM's fused_moe reads its sorted ids and
expert ids by the M block without a mask, the host pads every expert's rows to BLOCK_SIZE_M)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import applicable, apply_candidate
from mtmc_lsp.optimizer.actions import _common as c
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.analysis.kernel_model import kernel_model
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import TOL_FP16, job, run_jobs  # noqa: E402

H100 = get_profile("h100")

# A grouped matmul: rows are gathered through ``row_ids`` (padded per group to BLOCK_M), each M block has one
# group, read unmasked at ``group_ids + pid_m``; the N and K sides are masked.
GROUPED = '''import torch
import triton
import triton.language as tl

ENTRY = "grouped_matmul"


@triton.jit
def grouped_kernel(a_ptr, b_ptr, c_ptr, row_ids_ptr, group_ids_ptr, N, K, num_rows,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    rows = tl.load(row_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    row_mask = rows < num_rows
    group = tl.load(group_ids_ptr + pid_m)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * K + (k + offs_k)[None, :],
                    mask=row_mask[:, None] & ((k + offs_k)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + group * K * N + (k + offs_k)[:, None] * N + offs_n[None, :],
                    mask=((k + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rows[:, None] * N + offs_n[None, :], acc.to(tl.float16),
             mask=row_mask[:, None] & (offs_n[None, :] < N))


def grouped_matmul(x, w, groups):
    BLOCK_M = 16
    num_rows, K = x.shape
    G, _, N = w.shape
    # rows of each group padded to a multiple of BLOCK_M with the out-of-range id num_rows
    row_ids, group_ids = [], []
    for g in range(G):
        rows = (groups == g).nonzero().flatten().tolist()
        rows += [num_rows] * (-len(rows) % BLOCK_M)
        row_ids += rows
        group_ids += [g] * (len(rows) // BLOCK_M)
    row_ids = torch.tensor(row_ids, dtype=torch.int32, device=x.device)
    group_ids = torch.tensor(group_ids, dtype=torch.int32, device=x.device)
    out = torch.empty((num_rows, N), device=x.device, dtype=torch.float16)
    grid = lambda META: (triton.cdiv(row_ids.numel(), BLOCK_M) * triton.cdiv(N, META["BLOCK_N"]),)
    grouped_kernel[grid](x, w, out, row_ids, group_ids, N, K, num_rows, BLOCK_M=BLOCK_M, BLOCK_N=16, BLOCK_K=16)
    return out


def get_inputs(device="cpu"):
    x = torch.randn(40, 48, device=device, dtype=torch.float16)
    w = torch.randn(3, 48, 72, device=device, dtype=torch.float16)
    return [x, w, torch.randint(0, 3, (40,), device=device)]


def reference(x, w, groups):
    return torch.stack([x[i].float() @ w[groups[i]].float() for i in range(x.shape[0])]).half()
'''


def tilings(text: str) -> list:
    return [cand for cand in applicable(analyze(text), "grouped_kernel", H100) if cand.action == "tiling"]


def test_the_column_factor_and_k_change_and_the_padded_row_block_stays():
    offered = tilings(GROUPED)
    assert offered and all(set(cand.params) - {"num_warps"} == {"BLOCK_N", "BLOCK_K"} for cand in offered)
    new = apply_candidate(GROUPED, offered[0], H100).new_text
    assert "BLOCK_M=BLOCK_M, BLOCK_N=" in new and "BLOCK_N=16, BLOCK_K=16" not in new


def test_the_split_is_read_from_the_kernel_and_the_grid():
    analysis = analyze(GROUPED)
    kernel = analysis.kernel("grouped_kernel")
    _kdef, (launch,) = c.locate(c.parse(GROUPED), "grouped_kernel")
    model = kernel_model(analysis, kernel)  # the split is the model's pid // C and pid % C parts
    assert c.split_program_ids(model, kernel, "BLOCK_N", launch) == ("pid_m", "pid_n", True)
    assert c.split_program_ids(model, kernel, "BLOCK_M", launch) == ("pid_m", "pid_n", False)
    assert not c.accesses_masked_for(kernel, GROUPED, "BLOCK_M", True, launch=launch, model=model)
    assert c.accesses_masked_for(kernel, GROUPED, "BLOCK_N", True, launch=launch, model=model)


@pytest.mark.parametrize("change, why", [
    (("    group = tl.load(group_ids_ptr + pid_m)\n", "    group = tl.load(group_ids_ptr + pid_n)\n"),
     "an unmasked read indexed by the column factor"),
    (("    group = tl.load(group_ids_ptr + pid_m)\n", "    group = tl.load(group_ids_ptr + pid)\n"),
     "an unmasked read indexed by the flat id"),
    (("(triton.cdiv(row_ids.numel(), BLOCK_M) * triton.cdiv(N, META[\"BLOCK_N\"]),)",
      "(triton.cdiv(row_ids.numel() * N, BLOCK_M * META[\"BLOCK_N\"]),)"), "the grid is not a product of the two counts"),
    (("triton.cdiv(N, META[\"BLOCK_N\"])", "triton.cdiv(K, META[\"BLOCK_N\"])"), "the grid counts another size"),
    (("    pid_n = pid % num_pid_n\n", "    pid_n = pid % num_pid_n\n    pid_m = pid_m + 0\n"), "pid_m assigned twice"),
])
def test_refused_when_the_split_does_not_hold(change, why):
    text = GROUPED.replace(*change)
    assert text != GROUPED, why
    assert not tilings(text), why


@pytest.mark.slow
def test_tiled_grouped_matmul_stays_equivalent(tmp_path):
    jobs = [job(tmp_path, "grouped:reference", GROUPED, GROUPED, TOL_FP16, reference=True)]
    for cand in tilings(GROUPED):
        jobs.append(job(tmp_path, f"grouped:tiling:{cand.params}", GROUPED, apply_candidate(GROUPED, cand, H100).new_text,
                        TOL_FP16))
    results = run_jobs(jobs, tmp_path)
    assert len(results) > 1 and all(r["ok"] for r in results), [r for r in results if not r["ok"]]
