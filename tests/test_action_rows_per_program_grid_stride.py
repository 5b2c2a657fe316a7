"""rows_per_program on persistent kernels: a grid-stride loop over rows walks blocks of BLOCK_M rows, or is refused with why."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mtmc_lsp.optimizer.actions import ActionError, applicable
from mtmc_lsp.optimizer.actions.rows_per_program import row_facts
from mtmc_lsp.optimizer.analysis import analyze

sys.path.insert(0, str(Path(__file__).parent))
from test_action_rows_per_program import DEV, applied, offered, run_interpreted, why_not

# Triton's fused-softmax tutorial in its persistent form: each program starts at its own row and steps by the grid.
SOFTMAX = '''import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        row_ptr = in_ptr + row_idx * in_stride
        cols = tl.arange(0, BLOCK_SIZE)
        row = tl.load(row_ptr + cols, mask=cols < n_cols, other=-float("inf"))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        tl.store(out_ptr + row_idx * out_stride + cols, softmax_output, mask=cols < n_cols)


def softmax(x, programs=8):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    softmax_kernel[(min(n_rows, programs),)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE=BLOCK_SIZE, num_stages=2)
    return y
'''

# What the edit makes of it (TILE 8192 on the H100): the loop walks row blocks, the body is the one-row body vectorised.
SOFTMAX_AFTER = '''import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr, num_stages: tl.constexpr, BLOCK_M: tl.constexpr):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_block in tl.range(row_start * BLOCK_M, n_rows, row_step * BLOCK_M, num_stages=num_stages):
        row_idx = row_block + tl.arange(0, BLOCK_M)
        row_mask = row_idx < n_rows
        row_ptr = in_ptr + row_idx * in_stride
        cols = tl.arange(0, BLOCK_SIZE)
        row = tl.load(row_ptr[:, None] + cols[None, :], mask=row_mask[:, None] & (cols < n_cols), other=-float("inf"))
        row_minus_max = row - tl.max(row, axis=1)[:, None]
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=1)
        softmax_output = numerator / denominator[:, None]
        tl.store(out_ptr + row_idx[:, None] * out_stride + cols[None, :], softmax_output, mask=row_mask[:, None] & (cols < n_cols))


def softmax(x, programs=8):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    BLOCK_M = max(1, min(8192 // BLOCK_SIZE, triton.next_power_of_2(triton.cdiv(n_rows, 528))))
    softmax_kernel[(min(n_rows, programs),)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE=BLOCK_SIZE, BLOCK_M=BLOCK_M, num_stages=2, num_warps=8 if BLOCK_M > 1 else 4)
    return y
'''

# The inline spelling with a loop over the row inside: the row's sum of squares starts inside each trip.
L2_INLINE = '''import torch
import triton
import triton.language as tl


@triton.jit
def l2_norm_kernel(x_ptr, y_ptr, n_rows, n_cols, BLOCK_N: tl.constexpr):
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        ss = 0.0
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
            ss += tl.sum(x * x, axis=0)
        inv = 1.0 / tl.sqrt(ss + 1e-12)
        for start in range(0, n_cols, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
            tl.store(y_ptr + row * n_cols + cols, x * inv, mask=cols < n_cols)


def l2_norm(x, programs=3):
    M, N = x.shape
    y = torch.empty_like(x)
    l2_norm_kernel[(min(M, programs),)](x, y, M, N, BLOCK_N=32)
    return y
'''

# lightllm/Liger manner: an int64 program id, the weight loaded once before the loop, a grid lambda.
RMS_PRELOAD = '''import torch
import triton
import triton.language as tl


@triton.jit
def rms_norm_kernel(X, Y, W, stride, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(W + cols, mask=mask, other=0.0)
    for row in tl.range(pid, n_rows, nprog):
        x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        tl.store(Y + row * stride + cols, x * rstd * w, mask=mask)


def rms_norm(x, w, eps=1e-6, programs=3):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    grid = lambda meta: (min(n_rows, programs),)
    rms_norm_kernel[grid](x, y, w, x.stride(0), n_rows, n_cols, eps, BLOCK=triton.next_power_of_2(n_cols))
    return y
'''

LOOP = "    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):\n"
STORE = "        tl.store(out_ptr + row_idx * out_stride + cols, softmax_output, mask=cols < n_cols)\n"


# ---- what is offered ------------------------------------------------------------------------------
@pytest.mark.parametrize("text,kernel", [
    (SOFTMAX, "softmax_kernel"),
    (L2_INLINE, "l2_norm_kernel"),
    (RMS_PRELOAD, "rms_norm_kernel"),
    ((DEV / "sm_softmax_persistent.py").read_text(), "persistent_softmax_kernel"),
])
def test_offered_on_grid_stride_row_loops(text, kernel):
    assert [c.params for c in offered(text, kernel)] == [{"TILE": 4096}, {"TILE": 8192}]
    assert "grid unchanged" in offered(text, kernel)[0].title


def test_the_tutorial_softmax_edit():
    assert applied(SOFTMAX, "softmax_kernel") == SOFTMAX_AFTER
    # Applied once, the row index is a vector: not offered again, and the stale candidate is refused.
    assert not offered(SOFTMAX_AFTER, "softmax_kernel")
    with pytest.raises(ActionError):
        applied(SOFTMAX_AFTER, "softmax_kernel")


def test_inline_header_inner_loops_and_preloaded_weights():
    l2 = applied(L2_INLINE, "l2_norm_kernel")
    assert "    for row_block in range(tl.program_id(0) * BLOCK_M, n_rows, tl.num_programs(0) * BLOCK_M):\n" \
           "        row = row_block + tl.arange(0, BLOCK_M)\n        row_mask = row < n_rows\n" \
           "        ss = tl.zeros([BLOCK_M], dtype=tl.float32)\n" in l2
    assert "ss += tl.sum(x * x, axis=1)" in l2 and "l2_norm_kernel[(min(M, programs),)](x, y, M, N, BLOCK_N=BLOCK_N, BLOCK_M=BLOCK_M" in l2
    rms = applied(RMS_PRELOAD, "rms_norm_kernel")
    # The statements before the loop are row-independent: they stay as they are, and so does the lambda grid.
    assert "    w = tl.load(W + cols, mask=mask, other=0.0)\n    for row_block in tl.range(pid * BLOCK_M, n_rows, nprog * BLOCK_M):\n" in rms
    assert "row_mask = row < n_rows" in rms and "x * rstd[:, None] * w" in rms
    assert "grid = lambda meta: (min(n_rows, programs),)" in rms and "rms_norm_kernel[grid](" in rms


def test_row_facts_count_only_the_loops_inside_the_grid_stride_loop():
    for text, kernel, loops in ((SOFTMAX, "softmax_kernel", False), (L2_INLINE, "l2_norm_kernel", True)):
        analysis = analyze(text)
        facts = row_facts(analysis, analysis.kernel(kernel))
        assert facts is not None and facts.persistent and facts.loops is loops and facts.reduces


# ---- what is refused, and why ---------------------------------------------------------------------
@pytest.mark.parametrize("old,new,reason", [
    (LOOP, "    for row_idx in tl.range(row_start, n_rows, n_rows, num_stages=num_stages):\n",
     "steps by `n_rows`, not by tl.num_programs(0)"),
    (LOOP, "    for row_idx in tl.range(row_start, n_rows, 132, num_stages=num_stages):\n", "steps by `132`"),
    (STORE, STORE + "    tl.store(out_ptr, 0.0)\n", "statements follow the grid-stride loop"),
    ("        row_ptr = in_ptr + row_idx * in_stride\n", "        row_ptr = in_ptr + row_idx * in_stride + row_start * 0\n",
     "row_start (`tl.program_id(0)`) is used outside the grid-stride loop's header"),
    ("        row_ptr = in_ptr + row_idx * in_stride\n", "        row_ptr = in_ptr + row_idx * in_stride + tl.num_programs(0) * 0\n",
     "uses `tl.num_programs(0)` outside the grid-stride loop's header"),
    ("        row_ptr = in_ptr + row_idx * in_stride\n", "        row_idx = row_idx + 0\n        row_ptr = in_ptr + row_idx * in_stride\n",
     "binds the row index row_idx besides the grid-stride loop"),
    # Rows hop by the stride: a pointer moved each trip carries one row's position into the next.
    ("        row_ptr = in_ptr + row_idx * in_stride\n", "        in_ptr += in_stride\n        row_ptr = in_ptr + row_idx * in_stride\n",
     "in_ptr is carried from one row to the next"),
    (LOOP, "    for row_idx in tl.range(row_start, n_rows * 2, row_step, num_stages=num_stages):\n",
     "runs to `n_rows * 2`, which is not a kernel argument"),
    # A row writes where a later row reads: stored through the pointer it loads from, at another row's address.
    (STORE, "        tl.store(in_ptr + (row_idx + 1) * in_stride + cols, softmax_output, mask=cols < n_cols)\n",
     "stores through in_ptr, which it also loads"),
    ("        softmax_output = numerator / denominator\n",
     "        softmax_output = numerator / denominator\n        while n_cols > 1:\n            softmax_output = softmax_output * 1.0\n",
     "a `while` statement in the grid-stride loop"),
    # The body's own rules, as for one row a program.
    ("        softmax_output = numerator / denominator\n",
     "        softmax_output = numerator / denominator\n        if denominator > 1.0:\n            softmax_output = numerator\n",
     "branches on a per-row value"),
])
def test_refused_with_a_reason(old, new, reason):
    assert old in SOFTMAX
    text = SOFTMAX.replace(old, new)
    assert not offered(text, "softmax_kernel")
    assert reason in why_not(text, "softmax_kernel")


def test_a_running_value_across_rows_is_refused():
    # Started before the loop, stored and added to in every trip: a row's output depends on the program's earlier rows.
    text = SOFTMAX.replace("    row_step = tl.num_programs(0)\n", "    row_step = tl.num_programs(0)\n    seen = 0.0\n").replace(
        STORE, STORE.replace("softmax_output, mask", "softmax_output + seen, mask") + "        seen += tl.sum(softmax_output, axis=0)\n")
    assert not offered(text, "softmax_kernel")
    assert "seen is carried from one row to the next around the grid-stride loop" in why_not(text, "softmax_kernel")


def test_a_value_set_only_inside_a_nested_loop_and_read_after_it_is_carried():
    # With zero trips of the column loop, `x` would be the previous row's: refused, as is a sum started before the loop.
    text = L2_INLINE.replace("        inv = 1.0 / tl.sqrt(ss + 1e-12)\n", "        inv = 1.0 / tl.sqrt(ss + 1e-12) + tl.sum(x, axis=0) * 0\n")
    assert "x is carried from one row to the next" in why_not(text, "l2_norm_kernel")
    started_outside = L2_INLINE.replace("        ss = 0.0\n", "").replace("    for row in range(", "    ss = 0.0\n    for row in range(")
    assert "ss is carried from one row to the next" in why_not(started_outside, "l2_norm_kernel")


def test_a_value_set_on_one_branch_only_is_carried_and_on_both_is_not():
    one = "        if n_cols > 64:\n            scale = 2.0\n"
    both = one + "        else:\n            scale = 1.0\n"
    for branches, carried in ((one, True), (both, False)):
        text = SOFTMAX.replace("        softmax_output = numerator / denominator\n",
                               branches + "        softmax_output = numerator / denominator * scale\n")
        assert ("scale is carried from one row to the next" in (why_not(text, "softmax_kernel") or "")) is carried
        assert bool(offered(text, "softmax_kernel")) is not carried


def test_a_flat_persistent_loop_and_block_autotune_are_refused():
    # Blocks of a flat array walked by the grid: tiling's business, as without the loop.
    flat = SOFTMAX.replace("in_ptr + row_idx * in_stride", "in_ptr + row_idx * BLOCK_SIZE").replace(
        "out_ptr + row_idx * out_stride", "out_ptr + row_idx * BLOCK_SIZE").replace(
        "        row_minus_max = row - tl.max(row, axis=0)\n        numerator = tl.exp(row_minus_max)\n"
        "        denominator = tl.sum(numerator, axis=0)\n        softmax_output = numerator / denominator\n",
        "        softmax_output = tl.exp(row)\n")
    assert "flat elementwise kernel" in why_not(flat, "softmax_kernel")
    tuned = SOFTMAX.replace("@triton.jit\n", "@triton.autotune(configs=[triton.Config({'BLOCK_SIZE': 128})], key=['n_cols'])\n"
                            "@triton.jit\n").replace(", BLOCK_SIZE=BLOCK_SIZE", "")
    assert "grid-stride kernel autotuned over block sizes" in why_not(tuned, "softmax_kernel")


def test_range_from_the_program_id_without_a_step_is_not_a_grid_stride_loop():
    # ``range(pid)`` and ``range(pid, n)`` keep the one-row-per-program reasons.
    text = SOFTMAX.replace(LOOP, "    for row_idx in tl.range(row_start, n_rows):\n")
    assert why_not(text, "softmax_kernel").startswith("uses tl.num_programs(0) of the row axis, not as the step of a grid-stride loop")
    text = text.replace("    row_step = tl.num_programs(0)\n", "")
    assert "has bounds from the row index" in why_not(text, "softmax_kernel")


# ---- semantics under the interpreter --------------------------------------------------------------
SOFTMAX_INPUTS = "[torch.randn(37, 100)]"


@pytest.mark.slow
def test_rewritten_persistent_kernels_match_the_originals_under_the_interpreter(tmp_path):
    # sm_cap 16: 37 rows give BLOCK_M 4, so 10 row blocks (the last holds one row) over a grid of 3 programs: each
    # program takes several trips, and neither the rows nor the blocks divide by the grid.
    dev = (DEV / "sm_softmax_persistent.py").read_text()
    cases = [
        ("softmax", SOFTMAX, "softmax_kernel", "lambda x: m.softmax(x, programs=3)", SOFTMAX_INPUTS, 16),
        ("softmax_wide_blocks", SOFTMAX, "softmax_kernel", "lambda x: m.softmax(x, programs=2)", SOFTMAX_INPUTS, 2),
        ("l2_inline", L2_INLINE, "l2_norm_kernel", "m.l2_norm", "[torch.randn(37, 100)]", 16),
        ("rms_preload", RMS_PRELOAD, "rms_norm_kernel", "m.rms_norm", "[torch.randn(37, 100), torch.randn(100)]", 16),
        ("dev_persistent", dev, "persistent_softmax_kernel", "m.softmax", "m.get_inputs(device='cpu', rows=37, cols=100)", 16),
        ("dev_persistent_one_trip", dev, "persistent_softmax_kernel", "m.softmax", "m.get_inputs(device='cpu', rows=101, cols=100)", 4),
    ]
    jobs = [{"name": name, "before": text, "after": applied(text, kernel, sm_cap=cap), "entry": entry, "inputs": inputs}
            for name, text, kernel, entry, inputs, cap in cases]
    # Planted mistakes the comparison must catch: a start not scaled by BLOCK_M (programs overlap, rows are
    # left out), and a load whose row mask drops the last row (it reads -inf there: NaN out).
    good = applied(SOFTMAX, "softmax_kernel", sm_cap=16)
    unscaled = good.replace("tl.range(row_start * BLOCK_M,", "tl.range(row_start,")
    short_mask = good.replace("mask=row_mask[:, None] & (cols < n_cols), other", "mask=(row_idx < n_rows - 1)[:, None] & (cols < n_cols), other")
    assert unscaled != good and short_mask != good
    for name, after in (("planted_unscaled_start", unscaled), ("planted_short_mask", short_mask)):
        jobs.append({"name": name, "before": SOFTMAX, "after": after, "entry": "lambda x: m.softmax(x, programs=3)",
                     "inputs": SOFTMAX_INPUTS})
    results = run_interpreted(tmp_path, jobs)
    for name in ("planted_unscaled_start", "planted_short_mask"):
        assert results.pop(name)["worst"] > 1e-3, name
    for name, r in results.items():
        assert r["error"] is None and r["worst"] <= 1e-5, (name, r)


def test_heuristic_ranks_persistent_rows_low():
    """Measured 0.75-0.80x on the persistent softmax (H200, session 7): below the launch knobs."""
    from mtmc_lsp.optimizer.hardware import get_profile
    from mtmc_lsp.optimizer.policy.base import PolicyState
    from mtmc_lsp.optimizer.policy.heuristic import HeuristicPolicy

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "wild" / "dev" / "sm_softmax_persistent.py"
    analysis = analyze(path.read_text(), str(path))
    kernel = analysis.kernels[0]
    h200 = get_profile("h200")
    ranked = HeuristicPolicy().rank(PolicyState(analysis, kernel, h200, []), applicable(analysis, kernel.name, h200))
    scores = {r.candidate.action: r.score for r in ranked if r.candidate.action == "rows_per_program"}
    assert scores and max(scores.values()) <= 0.35
