"""rows_per_program reads a reduced loop accumulator once after its loop, so Triton 3.6 compiles the step.

Triton 3.6's OptimizeThreadLocality asserts (``loopResult.hasOneUse()``, "PassManager::run failed") on a
loop that accumulates ``acc = op(acc, tl.max/sum(tl.load(...), axis=1))`` from a constant and whose result
is read more than once after it: the H200 run of session 5 failed so on the dev log_softmax (reproduced by
``benchmarks/compile_triton_version.py --python <a triton 3.6 venv>`` on a CPU machine). The step now
inserts ``acc = tl.max(acc[:, None], axis=1)`` (a reduction of one value: exact) right after such a loop.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_action_rows_per_program import DEV, applied, run_interpreted  # noqa: E402

MARK = "one read of the loop's result"

# A row's sum stored and read again by a second pass: one 1-D read and one [BLOCK_M, 1] read after the loop.
SUM_NORMALIZE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def sum_normalize_kernel(x_ptr, s_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    total = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        total += tl.sum(x, axis=0)
    tl.store(s_ptr + row, total)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        tl.store(y_ptr + row * n_cols + cols, x / total, mask=cols < n_cols)


def sum_normalize(x):
    n_rows, n_cols = x.shape
    s = torch.empty(n_rows)
    y = torch.empty_like(x)
    sum_normalize_kernel[(n_rows,)](x, s, y, n_cols, BLOCK=16)
    return s, y
'''


def read_once_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if MARK in line]


def test_log_softmax_row_max_is_read_once_after_its_loop():
    new = applied((DEV / "sm_log_softmax_kernelbench.py").read_text(), "log_softmax_kernel", tile=4096)
    assert read_once_lines(new) == [f"row_max = tl.max(row_max[:, None], axis=1)  # {MARK} (Triton 3.6 asserts on more)"]
    lines = new.splitlines()
    after = lines.index(next(line for line in lines if MARK in line))
    assert lines[after - 1].strip() == "row_max = tl.maximum(row_max, tl.max(x, axis=1))"  # right after the max loop
    # ``total`` feeds only ``tl.log(total)``: its loop's result already has one use.
    assert "total = tl.sum(total" not in new


def test_a_sum_read_as_a_row_value_and_as_a_column_is_read_once():
    new = applied(SUM_NORMALIZE, "sum_normalize_kernel", tile=4096)
    assert read_once_lines(new) == [f"total = tl.sum(total[:, None], axis=1)  # {MARK} (Triton 3.6 asserts on more)"]


@pytest.mark.parametrize("old,new", [
    ("total += tl.sum(x, axis=0)", "total += tl.sum(x * x, axis=0)"),  # the reduction's input is not the load
    ("    tl.store(s_ptr + row, total)\n", ""),  # read once after the loop
])
def test_no_extra_read_where_triton_36_compiles_the_loop(old, new):
    assert old in SUM_NORMALIZE
    assert read_once_lines(applied(SUM_NORMALIZE.replace(old, new), "sum_normalize_kernel", tile=4096)) == []


def test_online_softmax_loop_is_left_alone():
    # m_new = maximum(m, max(x)) is read by several updates inside the loop: not the pattern Triton 3.6 rewrites.
    new = applied((DEV / "sm_online_loop.py").read_text(), "online_softmax_kernel", tile=4096)
    assert read_once_lines(new) == []


@pytest.mark.slow
def test_the_read_once_steps_match_the_originals_under_the_interpreter(tmp_path):
    log_softmax = (DEV / "sm_log_softmax_kernelbench.py").read_text()
    jobs = [
        {"name": "log_softmax", "before": log_softmax, "after": applied(log_softmax, "log_softmax_kernel", tile=4096, sm_cap=4),
         "entry": "lambda x: m.ModelNew()(x)", "inputs": "m.get_inputs(batch=37, features=300)"},
        {"name": "sum_normalize", "before": SUM_NORMALIZE, "after": applied(SUM_NORMALIZE, "sum_normalize_kernel", tile=4096, sm_cap=4),
         "entry": "m.sum_normalize", "inputs": "[torch.randn(37, 50)]"},
    ]
    assert all(MARK in job["after"] and "BLOCK_M = max(1" in job["after"] for job in jobs)
    results = run_interpreted(tmp_path, jobs)
    for name, r in results.items():
        assert r["error"] is None and r["worst"] <= 1e-5, (name, r)
