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


# A group norm's statistics: the loops run over a length the kernel computes from its arguments.
GROUP_STATS = '''import torch
import triton
import triton.language as tl

ENTRY = "group_center"


@triton.jit
def group_center_kernel(x_ptr, y_ptr, C, HW, groups, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    group_size = (C // groups) * HW
    base = pid * group_size
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, group_size, BLOCK):
        idx = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + base + idx, mask=idx < group_size, other=0.0)
    mean = tl.sum(acc, axis=0) / group_size
    for off in range(0, group_size, BLOCK):
        idx = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + idx, mask=idx < group_size, other=0.0)
        tl.store(y_ptr + base + idx, x - mean, mask=idx < group_size)


def group_center(x, groups=4):
    n, c = x.shape[:2]
    y = torch.empty_like(x)
    group_center_kernel[(n * groups,)](x, y, c, x[0, 0].numel(), groups=groups, BLOCK=32)
    return y


def get_inputs(device="cpu"):
    return [torch.randn(2, 8, 5, 7, device=device)]


def reference(x, groups=4):
    g = x.reshape(x.shape[0], groups, -1)
    return (g - g.mean(dim=2, keepdim=True)).reshape(x.shape)
'''

# Row variance whose column block is autotuned (FlagGems' manner): the configs choose only the block.
AUTOTUNED_VAR = '''import torch
import triton
import triton.language as tl

ENTRY = "row_var"


# Unbiased variance of each row.
@triton.autotune(
    configs=[triton.Config({"BLOCK_N": 16}, num_warps=2), triton.Config({"BLOCK_N": 64}, num_warps=4)],
    key=["N"],
    reset_to_zero=["Out"],
)
@triton.jit
def var_kernel(X, Out, N, BLOCK_N: tl.constexpr):
    X = X + tl.program_id(0) * N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for off in range(0, N, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        acc += tl.load(X + cols, mask=cols < N, other=0.0)
    mean = tl.sum(acc, axis=0) / N
    sq = tl.zeros([BLOCK_N], dtype=tl.float32)
    for off in range(0, N, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        d = tl.where(cols < N, tl.load(X + cols, mask=cols < N, other=0.0) - mean, 0.0)
        sq += d * d
    tl.store(Out + tl.program_id(0), tl.sum(sq, axis=0) / (N - 1))


def row_var(x):
    out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    var_kernel[lambda META: (x.shape[0],)](x, out, x.shape[1])
    return out


def get_inputs(device="cpu"):
    return [torch.randn(6, 100, device=device) * 3 + 1]


def reference(x):
    return torch.var(x, dim=1)
'''


def offered(text: str, kernel: str) -> bool:
    return any(c.action == "single_pass" for c in applicable(analyze(text), kernel, H100))


def test_a_length_computed_from_arguments_is_computed_at_the_launch():
    new = apply_candidate(GROUP_STATS, single_pass(GROUP_STATS, "group_center_kernel"), H100).new_text
    assert "BLOCK=triton.next_power_of_2((c // groups) * x[0, 0].numel())" in new
    assert "for off in" not in new and new.count("tl.load(") == 2


@pytest.mark.parametrize("change", [
    ("    base = pid * group_size\n", "    base = pid * group_size\n    group_size = group_size + 0\n"),  # reassigned
    ("group_size = (C // groups) * HW", "group_size = tl.load(x_ptr).to(tl.int32)"),  # read from memory
    ("group_size = (C // groups) * HW", "group_size = (C // groups) * HW\n    C = C + 1"),  # an argument reassigned
    ("x[0, 0].numel(), groups=groups, BLOCK=32)", "x[0, 0].numel(), BLOCK=32)"),  # groups not passed
])
def test_a_length_the_launch_cannot_compute_is_refused(change):
    text = GROUP_STATS.replace(*change)
    assert text != GROUP_STATS
    assert not offered(text, "group_center_kernel")


def test_an_autotuned_block_goes_with_its_decorator():
    new = apply_candidate(AUTOTUNED_VAR, single_pass(AUTOTUNED_VAR, "var_kernel"), H100).new_text
    assert "autotune" not in new and "triton.Config" not in new
    assert "# Unbiased variance of each row.\n@triton.jit\ndef var_kernel" in new
    assert "x.shape[1], BLOCK_N=triton.next_power_of_2(x.shape[1]), num_warps=min(16" in new


@pytest.mark.parametrize("change", [
    ('triton.Config({"BLOCK_N": 64}, num_warps=4)', 'triton.Config({"BLOCK_N": 64, "EVEN": 1}, num_warps=4)'),
    ('triton.Config({"BLOCK_N": 64}, num_warps=4)', 'triton.Config({"BLOCK_N": 64}, num_warps=4, pre_hook=None)'),
    ('    reset_to_zero=["Out"],\n', '    post_hook=lambda args, exception: None,\n'),
    ("configs=[triton.Config", "configs=CONFIGS + [triton.Config"),
])
def test_autotune_that_does_more_than_choose_the_block_is_refused(change):
    text = AUTOTUNED_VAR.replace(*change)
    assert text != AUTOTUNED_VAR
    assert not offered(text, "var_kernel")


def test_a_row_block_beside_a_second_block_is_refused():
    text = AUTOTUNED_VAR.replace("def var_kernel(X, Out, N, BLOCK_N: tl.constexpr):",
                                 "def var_kernel(X, Out, N, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr = 1):")
    assert not offered(text, "var_kernel")


@pytest.mark.slow
def test_computed_length_and_autotuned_block_stay_equivalent(tmp_path):
    jobs = []
    for name, text, kernel in (("group", GROUP_STATS, "group_center_kernel"), ("var", AUTOTUNED_VAR, "var_kernel")):
        new = apply_candidate(text, single_pass(text, kernel), H100).new_text
        jobs += [job(tmp_path, f"{name}:reference", text, text, TOL_FP32, reference=True),
                 job(tmp_path, f"{name}:single_pass", text, new, TOL_FP32)]
    results = run_jobs(jobs, tmp_path)
    assert all(r["ok"] for r in results), results


def test_a_lone_column_block_is_not_a_row():
    text = AUTOTUNED_VAR.replace("BLOCK_N", "BLOCK_M")
    assert not offered(text, "var_kernel")


# The block computed by @triton.heuristics, capped (Liger's and FlagGems' manner), beside another heuristic that reads it.
HEURISTIC_VAR = AUTOTUNED_VAR.replace('''@triton.autotune(
    configs=[triton.Config({"BLOCK_N": 16}, num_warps=2), triton.Config({"BLOCK_N": 64}, num_warps=4)],
    key=["N"],
    reset_to_zero=["Out"],
)
''', '''@triton.heuristics({
    "BLOCK_N": lambda args: min(triton.next_power_of_2(args["N"]), 32),
    "EVEN_N": lambda args: args["N"] % args["BLOCK_N"] == 0,
})
''').replace("BLOCK_N: tl.constexpr):", "BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr):")


def test_a_heuristic_block_loses_its_entry_and_the_launch_sets_it():
    new = apply_candidate(HEURISTIC_VAR, single_pass(HEURISTIC_VAR, "var_kernel"), H100).new_text
    assert '@triton.heuristics({\n    "EVEN_N": lambda args: args["N"] % args["BLOCK_N"] == 0,\n})\n@triton.jit' in new
    assert "x.shape[1], BLOCK_N=triton.next_power_of_2(x.shape[1]), num_warps=min(16" in new
    alone = HEURISTIC_VAR.replace('    "EVEN_N": lambda args: args["N"] % args["BLOCK_N"] == 0,\n', "").replace(
        ", EVEN_N: tl.constexpr", "")
    new = apply_candidate(alone, single_pass(alone, "var_kernel"), H100).new_text
    assert "heuristics" not in new and "# Unbiased variance of each row.\n@triton.jit\ndef var_kernel" in new


def test_a_block_both_autotuned_and_heuristic_is_refused():
    text = HEURISTIC_VAR.replace("@triton.heuristics({", '@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=["N"])\n@triton.heuristics({')
    assert not offered(text, "var_kernel")


@pytest.mark.slow
def test_a_heuristic_block_stays_equivalent(tmp_path):
    new = apply_candidate(HEURISTIC_VAR, single_pass(HEURISTIC_VAR, "var_kernel"), H100).new_text
    results = run_jobs([job(tmp_path, "hvar:reference", HEURISTIC_VAR, HEURISTIC_VAR, TOL_FP32, reference=True),
                        job(tmp_path, "hvar:single_pass", HEURISTIC_VAR, new, TOL_FP32)], tmp_path)
    assert all(r["ok"] for r in results), results


def test_why_not_names_the_refused_precondition():
    from mtmc_lsp.optimizer.actions.single_pass import ACTION

    def why(text: str, kernel: str) -> str | None:
        analysis = analyze(text)
        return ACTION.why_not(analysis, analysis.kernel(kernel), H100)

    assert why(GROUP_STATS, "group_center_kernel") is None
    assert "is neither a kernel argument nor a local" in why(GROUP_STATS.replace("    base = pid * group_size\n",
                                                                                 "    base = pid * group_size\n    group_size += 1\n"),
                                                             "group_center_kernel")
    assert "autotune configs choose more than BLOCK_N" in why(
        AUTOTUNED_VAR.replace('{"BLOCK_N": 64}', '{"BLOCK_N": 64, "EVEN": 1}'), "var_kernel")


def test_refused_after_rows_per_program_computed_its_row_block_from_the_block():
    """BLOCK_M = ... // BLOCK_SIZE on the host: a whole-row block at the launch would leave BLOCK_M from the old one."""
    from mtmc_lsp.optimizer.actions import apply_candidate
    from mtmc_lsp.optimizer.actions.refusals import refusals

    target = get_profile("h200")
    text = (Path(__file__).resolve().parents[1] / "benchmarks" / "wild" / "dev" / "sm_log_softmax_kernelbench.py").read_text()
    rows = next(c for c in applicable(analyze(text), "log_softmax_kernel", target) if c.action == "rows_per_program")
    after = analyze(apply_candidate(text, rows, target).new_text)
    assert not [c for c in applicable(after, "log_softmax_kernel", target) if c.action == "single_pass"]
    reason = {r.action: r.reason for r in refusals(after, after.kernel("log_softmax_kernel"), target)}["single_pass"]
    assert "computes other values from BLOCK_SIZE" in reason
