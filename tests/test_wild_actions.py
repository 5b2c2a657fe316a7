"""benchmarks/wild_actions.py: the survey keeps why no structural step applies, and reports the commonest reasons."""

from __future__ import annotations

import sys
from pathlib import Path

from mtmc_lsp.optimizer.hardware import get_profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import wild_actions  # noqa: E402

COMPUTED_BLOCK = '''import torch
import triton
import triton.language as tl


@triton.jit
def cumsum_kernel(x_ptr, y_ptr, n_rows, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    if row >= n_rows:  # a per-row guard: rows_per_program does not apply either
        return
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + row * n_cols + cols, tl.cumsum(x, axis=0), mask=cols < n_cols)


def cumsum(x):
    y = torch.empty_like(x)
    cumsum_kernel[(x.shape[0],)](x, y, x.shape[0], x.shape[1], BLOCK_SIZE=triton.next_power_of_2(x.shape[1]))
    return y
'''


def test_rows_without_a_structural_step_keep_the_reasons_and_the_report_counts_them():
    rows = wild_actions.survey_text(COMPUTED_BLOCK, "cumsum.py", get_profile("h100"), part="dev")
    (row,) = rows
    assert not any(c["action"] not in wild_actions.NOT_STRUCTURAL for c in row["candidates"])
    assert "triton.next_power_of_2(x.shape[1])" in row["refused"]["tiling"]
    assert "warps" not in row["refused"]  # launch knobs are not structural: not explained here
    other = dict(row, refused={"tiling": row["refused"]["tiling"].replace("x.shape[1]", "n")})
    table = wild_actions.refusal_table([row, other], "tiling")
    # Both computed blocks count as one kind of reason: the quoted code and the block's name are masked.
    assert table[-1].endswith("| 2 |") and "`...`" in table[-1] and "BLOCK:" in table[-1]
    assert wild_actions.refusal_table([row], "fusion") == []
