"""tiling: a row block that @triton.heuristics caps (``min(next_power_of_2(N), CAP)``) gets larger caps, never smaller."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ActionError, Candidate, applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import TOL_FP32, job, run_jobs  # noqa: E402

H100 = get_profile("h100")

# Row logsumexp: the whole row in one block up to 64 elements, an online loop of 64-element blocks past it.
CAPPED_LSE = '''import torch
import triton
import triton.language as tl

ENTRY = "lse"


@triton.heuristics({
    "BLOCK": lambda args: min(triton.next_power_of_2(args["n_cols"]), 64),
    "WHOLE_ROW": lambda args: args["n_cols"] <= 64,
})
@triton.jit
def lse_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, WHOLE_ROW: tl.constexpr):
    x_ptr += tl.program_id(0) * n_cols
    if WHOLE_ROW:
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < n_cols, other=float("-inf"))
        m = tl.max(x, axis=0)
        s = tl.sum(tl.exp(x - m), axis=0)
    else:
        m = float("-inf")
        s = 0.0
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + cols, mask=cols < n_cols, other=float("-inf"))
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
    tl.store(out_ptr + tl.program_id(0), m + tl.log(s))


def lse(x, y):
    out = torch.empty(x.shape[0] + y.shape[0], device=x.device)
    lse_kernel[(x.shape[0],)](x, out, x.shape[1])
    lse_kernel[(y.shape[0],)](y, out[x.shape[0]:], y.shape[1])
    return out


def get_inputs(device="cpu"):
    return [torch.randn(3, 50, device=device), torch.randn(3, 3000, device=device)]


def reference(x, y):
    return torch.cat([torch.logsumexp(x, dim=1), torch.logsumexp(y, dim=1)])
'''


def caps(text: str) -> list[dict]:
    return [c.params for c in applicable(analyze(text), "lse_kernel", H100) if c.action == "tiling"]


def test_a_heuristics_cap_is_only_raised():
    assert caps(CAPPED_LSE) == [{"BLOCK": 1024}, {"BLOCK": 2048}, {"BLOCK": 4096}]
    assert caps(CAPPED_LSE.replace("), 64),", "), 2048),")) == [{"BLOCK": 4096}]
    new = apply_candidate(CAPPED_LSE, Candidate("tiling", "Tiling", "lse_kernel", {"BLOCK": 2048}, "", 0), H100).new_text
    assert 'lambda args: min(triton.next_power_of_2(args["n_cols"]), 2048),' in new
    assert new.count("\n") == CAPPED_LSE.count("\n") and 'args["n_cols"] <= 64' in new
    with pytest.raises(ActionError):  # lowering it would give the whole-row branch a block shorter than the row
        apply_candidate(CAPPED_LSE, Candidate("tiling", "Tiling", "lse_kernel", {"BLOCK": 32}, "", 0), H100)


@pytest.mark.parametrize("change", [
    ('min(triton.next_power_of_2(args["n_cols"]), 64)', 'triton.next_power_of_2(args["n_cols"]) // 2'),  # no cap
    ('min(triton.next_power_of_2(args["n_cols"]), 64)', 'min(args["n_cols"], 64)'),  # not a power of two
    ("x = tl.load(x_ptr + cols, mask=cols < n_cols, other=float(\"-inf\"))\n            m_new",
     "x = tl.load(x_ptr + cols)\n            m_new"),  # an unmasked access the block moves
    ("for start in range(0, n_cols, BLOCK):", "for start in range(0, n_cols, 64):"),  # no loop steps by the block
])
def test_a_cap_that_cannot_be_proved_safe_is_refused(change):
    text = CAPPED_LSE.replace(*change)
    assert text != CAPPED_LSE
    assert caps(text) == []


@pytest.mark.slow
def test_a_raised_cap_stays_equivalent(tmp_path):
    new = apply_candidate(CAPPED_LSE, Candidate("tiling", "Tiling", "lse_kernel", {"BLOCK": 1024}, "", 0), H100).new_text
    results = run_jobs([job(tmp_path, "lse:reference", CAPPED_LSE, CAPPED_LSE, TOL_FP32, reference=True),
                        job(tmp_path, "lse:heuristics_cap", CAPPED_LSE, new, TOL_FP32)], tmp_path)
    assert all(r["ok"] for r in results), results
