"""split_reduction: a sum loop without tl.dot split over programs that add their parts; refused where adding the
parts would not give the whole; equivalent in the interpreter."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, applicable, apply_candidate
from mtmc_lsp.optimizer.actions import _common as c
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from corpus.kernels import kernel_path  # noqa: E402
from test_actions_semantics import TOL_FP16, job, run_jobs  # noqa: E402

H100 = get_profile("h100")
SPLIT = ACTIONS["split_reduction"]
DOC = sys.modules[type(SPLIT).__module__].__doc__
BEFORE = re.search(r"```python before\n(.*?)```", DOC, re.S).group(1)
COL_SUM = "import torch\nimport triton\nimport triton.language as tl\n\nENTRY = \"col_sum\"\n\n\n" + BEFORE + '''

def get_inputs(device="cpu"):
    return [torch.randn(300, 100, device=device, dtype=torch.float16)]


def reference(x):
    return x.float().sum(0).half()
'''

# LayerNorm's weight and bias gradients from per-row partials: two sums, two outputs, a lambda grid over META.
DW_DB = '''import torch
import triton
import triton.language as tl

ENTRY = "dw_db"


@triton.jit
def dwdb_kernel(PDW, PDB, DW, DB, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc_w = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_b = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        acc_w += tl.load(PDW + offs, mask=mask, other=0.0)
        acc_b += tl.load(PDB + offs, mask=mask, other=0.0)
    dw = tl.sum(acc_w, axis=0)
    db = tl.sum(acc_b, axis=0) / M
    tl.store(DW + cols, dw.to(DW.dtype.element_ty), mask=cols < N)
    tl.store(DB + cols, db, mask=cols < N)


def dw_db(pdw, pdb):
    M, N = pdw.shape
    dw = torch.empty((N,), dtype=torch.float16, device=pdw.device)
    db = torch.empty((N,), dtype=torch.float32, device=pdw.device)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]),)
    dwdb_kernel[grid](pdw, pdb, dw, db, M, N, BLOCK_M=16, BLOCK_N=32)
    return torch.cat((dw.float(), db))


def get_inputs(device="cpu"):
    return [torch.randn(200, 70, device=device), torch.randn(200, 70, device=device)]


def reference(pdw, pdb):
    return torch.cat((pdw.sum(0).half().float(), pdb.mean(0)))
'''

# One row per iteration into a 1-D accumulator, a pointer stepped by the row stride.
ROW_BY_ROW = '''import torch
import triton
import triton.language as tl

ENTRY = "bias_grad"


@triton.jit
def bias_grad_kernel(dy_ptr, out_ptr, M, N, stride, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ptrs = dy_ptr + cols
    acc = 0.0
    for r in range(M):
        acc += tl.load(ptrs, mask=cols < N, other=0.0).to(tl.float32)
        ptrs += stride
    tl.store(out_ptr + cols, acc, mask=cols < N)


def bias_grad(dy):
    M, N = dy.shape
    out = torch.empty((N,), device=dy.device, dtype=torch.float32)
    bias_grad_kernel[(triton.cdiv(N, 64),)](dy, out, M, N, dy.stride(0), BLOCK_N=64)
    return out


def get_inputs(device="cpu"):
    return [torch.randn(90, 100, device=device, dtype=torch.bfloat16)]


def reference(dy):
    return dy.float().sum(0)
'''


def offered(text: str, kernel: str) -> list:
    return [cand for cand in applicable(analyze(text), kernel, H100) if cand.action == "split_reduction"]


def why_refused(text: str, kernel: str) -> str:
    analysis = analyze(text)
    with pytest.raises(ActionError) as caught:
        SPLIT._plan(c.parse(text), analysis, analysis.kernel(kernel))
    return str(caught.value)


def test_two_sums_get_two_zeroed_outputs_and_the_half_one_a_cast():
    assert {cand.params["SPLIT"] for cand in offered(DW_DB, "dwdb_kernel")} == {4, 8, 16}
    new = apply_candidate(DW_DB, offered(DW_DB, "dwdb_kernel")[0], H100).new_text
    assert "for start in range(pid_split * BLOCK_M, M, SPLIT * BLOCK_M):" in new
    assert "tl.atomic_add(DW + cols, dw, mask=cols < N)" in new and "tl.atomic_add(DB + cols, db, mask=cols < N)" in new
    assert "dw = torch.zeros((N,), dtype=torch.float32" in new and "db = torch.zeros((N,), dtype=torch.float32" in new
    assert "(triton.cdiv(N, meta[\"BLOCK_N\"]), meta[\"SPLIT\"])" in new  # the lambda's own parameter name
    assert "    dw = dw.to(torch.float16)\n    return torch.cat(" in new  # db was fp32 already: no cast


def test_pointer_stepping_row_loop_splits_its_step():
    new = apply_candidate(ROW_BY_ROW, offered(ROW_BY_ROW, "bias_grad_kernel")[0], H100).new_text
    assert "    ptrs += pid_split * (stride)\n    for r in range(pid_split, M, SPLIT):\n" in new
    assert "        ptrs += SPLIT * (stride)\n" in new


def test_a_dot_loop_is_split_k_not_this():
    matmul = kernel_path("matmul").read_text()
    assert not offered(matmul, "matmul_kernel")
    assert any(cand.action == "split_k" for cand in applicable(analyze(matmul), "matmul_kernel", H100))


@pytest.mark.parametrize("change, why", [
    (("    db = tl.sum(acc_b, axis=0) / M\n", "    db = tl.sqrt(tl.sum(acc_b, axis=0))\n"), "more than a sum, a scale or a cast"),
    (("    db = tl.sum(acc_b, axis=0) / M\n", "    db = tl.sum(acc_b, axis=0) + 1.0\n"), "more than a sum, a scale or a cast"),
    (("    db = tl.sum(acc_b, axis=0) / M\n", "    db = tl.sum(acc_b, axis=0) / tl.sum(acc_w, axis=0)\n"),
     "more than a sum, a scale or a cast"),
    (("    db = tl.sum(acc_b, axis=0) / M\n", "    db = tl.max(acc_b, axis=0)\n"), "more than a sum, a scale or a cast"),
    (("    acc_b = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n",
      "    acc_b = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32) + 1.0\n"), "does not start at zero"),
    (("        acc_b += tl.load(PDB + offs, mask=mask, other=0.0)\n",
      "        acc_b += tl.load(PDB + offs, mask=mask, other=0.0)\n        tl.store(PDB + offs, acc_b, mask=mask)\n"),
     "stores something besides"),
    (("    tl.store(DB + cols, db, mask=cols < N)\n", "    tl.store(DB + cols, db, mask=cols < N)\n    tl.store(DB, db)\n"),
     "stored twice"),
    (("    cols = tl.program_id(0)", "    first = tl.load(DW)\n    cols = tl.program_id(0)"), "reads DW"),
    (("    db = torch.empty((N,), dtype=torch.float32", "    db = torch.ones((N,), dtype=torch.float32"),
     "not allocated with torch.empty"),
    (("        acc_w += tl.load(PDW + offs, mask=mask, other=0.0)\n",
      "        acc_w = acc_w * 0.5 + tl.load(PDW + offs, mask=mask, other=0.0)\n"), "carried across"),
])
def test_refused_where_the_parts_do_not_add_up(change, why):
    text = DW_DB.replace(*change)
    assert text != DW_DB
    assert why in why_refused(text, "dwdb_kernel")
    assert not offered(text, "dwdb_kernel")


@pytest.mark.slow
def test_split_sums_stay_equivalent(tmp_path):
    jobs = []
    for label, text, kernel in (("col_sum", COL_SUM, "col_sum_kernel"), ("dw_db", DW_DB, "dwdb_kernel"),
                                ("row_by_row", ROW_BY_ROW, "bias_grad_kernel")):
        jobs.append(job(tmp_path, f"{label}:reference", text, text, TOL_FP16, reference=True))
        for cand in offered(text, kernel):
            jobs.append(job(tmp_path, f"{label}:split{cand.params['SPLIT']}", text, apply_candidate(text, cand, H100).new_text,
                            TOL_FP16))
    results = run_jobs(jobs, tmp_path)
    assert len(results) == 12 and all(r["ok"] for r in results), [r for r in results if not r["ok"]]
