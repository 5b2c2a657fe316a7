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
