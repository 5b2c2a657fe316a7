"""online_softmax: the max loop and the sum-of-exponentials loop over a row become one loop with a rescaled sum."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ActionError, applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_action_single_pass import LOG_SOFTMAX  # noqa: E402
from corpus.kernels import kernel_path  # noqa: E402
from test_actions_semantics import TOL_FP32, job, run_jobs  # noqa: E402

H100 = get_profile("h100")
SOFTMAX = kernel_path("softmax").read_text()


def online(text: str, kernel: str):
    return [c for c in applicable(analyze(text), kernel, H100) if c.action == "online_softmax"]


def test_three_pass_softmax_loses_one_pass():
    (cand,) = online(SOFTMAX, "softmax_kernel")
    assert cand.params == {"max": "row_max", "sum": "denom"}
    new = apply_candidate(SOFTMAX, cand, H100).new_text
    assert new.count("for start in range(0, n_cols, BLOCK_SIZE):") == 2
    assert "denom = denom * tl.exp(row_max - row_max_new) + tl.sum(tl.exp(x - row_max_new), axis=0)" in new
    assert "single_pass" in {c.action for c in applicable(analyze(new), "softmax_kernel", H100)}  # still one block away


def test_positional_and_log_softmax_spellings():
    (cand,) = online(LOG_SOFTMAX, "log_softmax_kernel")
    assert cand.params == {"max": "m", "sum": "s"}


@pytest.mark.parametrize("change", [
    ("denom += tl.sum(tl.exp(x - row_max), axis=0)", "denom += tl.sum(tl.exp(x - row_max) * x, axis=0)"),  # not a softmax sum
    ("    denom = 0.0\n", "    denom = 0.0\n    row_max = row_max * 2.0\n"),  # the max changes between the loops
    ("        row_max = tl.maximum(row_max, tl.max(x, axis=0))\n",
     "        row_max = tl.maximum(row_max, tl.max(x, axis=0))\n        tl.store(row_out + cols, x, mask=cols < n_cols)\n"),
])
def test_refused_when_not_a_max_then_sum(change):
    text = SOFTMAX.replace(*change)
    assert text != SOFTMAX
    assert not online(text, "softmax_kernel")


def test_stale_candidate_is_refused():
    (cand,) = online(SOFTMAX, "softmax_kernel")
    with pytest.raises(ActionError):
        apply_candidate(SOFTMAX.replace("denom += tl.sum(tl.exp(x - row_max), axis=0)", "denom += tl.sum(x, axis=0)"), cand, H100)


@pytest.mark.slow
def test_online_softmax_stays_equivalent(tmp_path):
    soft = apply_candidate(SOFTMAX, online(SOFTMAX, "softmax_kernel")[0], H100).new_text
    log = apply_candidate(LOG_SOFTMAX, online(LOG_SOFTMAX, "log_softmax_kernel")[0], H100).new_text
    both = apply_candidate(soft, next(c for c in applicable(analyze(soft), "softmax_kernel", H100) if c.action == "single_pass"), H100).new_text
    results = run_jobs([job(tmp_path, "softmax:online", SOFTMAX, soft, TOL_FP32),
                        job(tmp_path, "softmax:online+single_pass", SOFTMAX, both, TOL_FP32),
                        job(tmp_path, "log_softmax:online", LOG_SOFTMAX, log, TOL_FP32)], tmp_path)
    assert all(r["ok"] for r in results), results


# The suite's cross entropy after row_fusion: the max is stored and re-cast between the loops, and the fused
# kernel's second half binds ``row`` again (what row_fusion writes).
CROSS_ENTROPY = (Path(__file__).parents[1] / "benchmarks" / "suite" / "cross_entropy.py").read_text() + '\nENTRY = "cross_entropy"\n'


def fused_cross_entropy() -> str:
    fusion = next(c for c in applicable(analyze(CROSS_ENTROPY), "row_max_kernel", H100) if c.action == "row_fusion")
    return apply_candidate(CROSS_ENTROPY, fusion, H100).new_text


def test_a_stored_and_cast_maximum_between_the_loops_follows_the_merged_loop():
    fused = fused_cross_entropy()
    assert "tl.store(max_ptr + row, row_max)\n    row = tl.program_id(0)\n    row_max = (row_max).to(tl.float32)" in fused
    (cand,) = online(fused, "row_max_kernel")
    new = apply_candidate(fused, cand, H100).new_text
    merged = new.index("row_max = row_max_new")
    assert new.count("for start in range") == 1 and merged < new.index("tl.store(max_ptr + row, row_max)")


@pytest.mark.parametrize("between", [
    "    row = row + 1\n",  # a name the loops read now means something else
    "    tl.store(sum_ptr + row, total)\n",  # reads the sum before it is complete
    "    row_max = row_max * 2.0\n",  # the maximum itself changes
])
def test_refused_when_what_lies_between_the_loops_cannot_follow_them(between):
    fused = fused_cross_entropy()
    text = fused.replace("    row_max = (row_max).to(tl.float32)\n", "    row_max = (row_max).to(tl.float32)\n" + between, 1)
    assert text != fused and not online(text, "row_max_kernel")


@pytest.mark.slow
def test_the_fused_cross_entropy_stays_equivalent(tmp_path):
    fused = fused_cross_entropy()
    new = apply_candidate(fused, online(fused, "row_max_kernel")[0], H100).new_text
    (result,) = run_jobs([job(tmp_path, "cross_entropy:row_fusion+online", CROSS_ENTROPY, new, TOL_FP32)], tmp_path)
    assert result["ok"], result


# Row variance in two passes (FlagGems' and the group norm's spelling): a masked sum, then centred squares.
TWO_PASS_VAR = '''import torch
import triton
import triton.language as tl

ENTRY = "row_var"


@triton.jit
def var_kernel(x_ptr, out_ptr, mean_ptr, n_cols, BLOCK: tl.constexpr):
    row = x_ptr + tl.program_id(0) * n_cols
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(row + cols, mask=cols < n_cols, other=0.0)
    mean = tl.sum(acc, axis=0) / n_cols
    # centred squares
    sq = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(row + cols, mask=cols < n_cols, other=0.0)
        x = tl.where(cols < n_cols, x - mean, 0.0)
        sq += x * x
    tl.store(mean_ptr + tl.program_id(0), mean)
    tl.store(out_ptr + tl.program_id(0), tl.sum(sq, axis=0) / (n_cols - 1))


def row_var(x):
    out = torch.empty(x.shape[0], device=x.device)
    mean = torch.empty(x.shape[0], device=x.device)
    var_kernel[(x.shape[0],)](x, out, mean, x.shape[1], BLOCK=16)
    return torch.stack([out, mean])


def get_inputs(device="cpu"):
    return [torch.randn(4, 300, device=device) * 3 + 100]


def reference(x):
    return torch.stack([torch.var(x, dim=1), x.mean(dim=1)])
'''
# The same with the load named in both loops and the centred value in its own name.
NAMED_LOAD_VAR = TWO_PASS_VAR.replace(
    "        acc += tl.load(row + cols, mask=cols < n_cols, other=0.0)\n",
    "        x = tl.load(row + cols, mask=cols < n_cols, other=0.0)\n        acc += x\n").replace(
    "        x = tl.load(row + cols, mask=cols < n_cols, other=0.0)\n        x = tl.where(cols < n_cols, x - mean, 0.0)\n        sq += x * x\n",
    "        x = tl.load(row + cols, mask=cols < n_cols, other=0.0)\n        d = tl.where(cols < n_cols, x - mean, 0.0)\n        sq += d * d\n")


def test_two_pass_variance_becomes_one_welford_loop():
    (cand,) = online(TWO_PASS_VAR, "var_kernel")
    assert cand.params == {"mean": "acc", "sq": "sq"}
    new = apply_candidate(TWO_PASS_VAR, cand, H100).new_text
    assert new.count("for off in") == 1 and new.count("tl.load(") == 1
    assert "        acc += delta / tl.maximum(count, 1.0)\n        sq += delta * tl.where(cols < n_cols, x - acc, 0.0)\n" in new
    assert "    mean = tl.sum(acc * count, axis=0) / n_cols\n    # centred squares\n    sq += count * (acc - mean) * (acc - mean)\n" in new


def test_a_load_named_in_both_loops_is_the_welford_sample():
    (cand,) = online(NAMED_LOAD_VAR, "var_kernel")
    new = apply_candidate(NAMED_LOAD_VAR, cand, H100).new_text
    assert new.count("tl.load(") == 1 and "delta = tl.where(cols < n_cols, x - acc, 0.0)" in new


@pytest.mark.parametrize("change", [
    ("x = tl.where(cols < n_cols, x - mean, 0.0)", "x = tl.where(cols < n_cols - 1, x - mean, 0.0)"),  # another mask
    ("acc += tl.load(row + cols, mask=cols < n_cols, other=0.0)", "acc += tl.load(row + cols, mask=cols < n_cols, other=1.0)"),
    ("        sq += x * x\n", "        sq += x * x\n        tl.store(row + cols, x, mask=cols < n_cols)\n"),  # stores
    ("    tl.store(mean_ptr + tl.program_id(0), mean)\n", "    tl.store(mean_ptr + tl.program_id(0), tl.sum(acc, axis=0))\n"),
    ("    tl.store(mean_ptr + tl.program_id(0), mean)\n", "    tl.store(mean_ptr + tl.program_id(0), tl.sum(x, axis=0))\n"),
    ("    mean = tl.sum(acc, axis=0) / n_cols\n", "    mean = tl.sum(acc, axis=0) / n_cols + acc[0]\n"),
    ("sq = tl.zeros([BLOCK], dtype=tl.float32)", "sq = tl.zeros([BLOCK], dtype=tl.float16)"),
    ("        sq += x * x\n", "        sq += x * mean\n"),
])
def test_refused_when_not_a_sum_then_centred_squares(change):
    text = TWO_PASS_VAR.replace(*change)
    assert text != TWO_PASS_VAR
    assert not online(text, "var_kernel")


@pytest.mark.slow
def test_welford_stays_equivalent(tmp_path):
    jobs = []
    for name, text in (("var", TWO_PASS_VAR), ("var_named", NAMED_LOAD_VAR)):
        new = apply_candidate(text, online(text, "var_kernel")[0], H100).new_text
        jobs += [job(tmp_path, f"{name}:reference", text, text, TOL_FP32, reference=True),
                 job(tmp_path, f"{name}:welford", text, new, TOL_FP32)]
    # One Welford loop is still a row loop: single_pass then holds the row in one block.
    welford = apply_candidate(TWO_PASS_VAR, online(TWO_PASS_VAR, "var_kernel")[0], H100).new_text
    single = next(c for c in applicable(analyze(welford), "var_kernel", H100) if c.action == "single_pass")
    jobs.append(job(tmp_path, "var:welford+single_pass", TWO_PASS_VAR, apply_candidate(welford, single, H100).new_text, TOL_FP32))
    results = run_jobs(jobs, tmp_path)
    assert all(r["ok"] for r in results), results


def test_why_not_says_which_two_loops_it_looks_for():
    from mtmc_lsp.optimizer.actions.online_softmax import ACTION

    analysis = analyze(TWO_PASS_VAR)
    assert ACTION.why_not(analysis, analysis.kernel("var_kernel"), H100) is None
    other = analyze(TWO_PASS_VAR.replace("sq += x * x", "sq += x * mean"))
    assert "centred-squares loop" in ACTION.why_not(other, other.kernel("var_kernel"), H100)
