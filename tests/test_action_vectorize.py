"""vectorize: one element per program becomes a block per program; gathers and existing masks are masked too;
refused where elements would mix or branch; equivalent in the interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import ACTIONS, ActionError, applicable, apply_candidate
from mtmc_lsp.optimizer.actions import _common as c
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from corpus.kernels import kernel_path  # noqa: E402
from test_actions_semantics import TOL_FP32, job, run_jobs  # noqa: E402

H100 = get_profile("h100")
VECTORIZE = ACTIONS["vectorize"]

# An embedding lookup scaled by a per-row weight, one output element per program: a gather through a loaded
# index, a scalar load shared by all programs, a mask of its own on the weight; the grid a name.
GATHER = '''import torch
import triton
import triton.language as tl

ENTRY = "lookup"


@triton.jit
def lookup_kernel(ids_ptr, table_ptr, weight_ptr, scale_ptr, out_ptr, dim, n_weights):
    i = tl.program_id(axis=0)
    row = i // dim
    token = tl.load(ids_ptr + row)
    value = tl.load(table_ptr + token * dim + i % dim)
    w = tl.load(weight_ptr + row, mask=row < n_weights, other=1.0)
    tl.store(out_ptr + i, value * w * tl.load(scale_ptr))


def lookup(ids, table, weight, scale):
    dim = table.shape[1]
    out = torch.empty((ids.numel(), dim), device=table.device, dtype=table.dtype)
    grid = (ids.numel() * dim,)
    lookup_kernel[grid](ids, table, weight, scale, out, dim, weight.numel())
    return out


def get_inputs(device="cpu"):
    return [torch.randint(0, 30, (7,), device=device), torch.randn(30, 5, device=device),
            torch.rand(5, device=device), torch.tensor([2.0], device=device)]


def reference(ids, table, weight, scale):
    w = torch.ones(ids.numel(), device=table.device)
    w[:5] = weight
    return table[ids] * w[:, None] * scale
'''


def offered(text: str) -> list:
    return [cand for cand in applicable(analyze(text), "lookup_kernel", H100) if cand.action == "vectorize"]


def why_refused(text: str) -> str:
    analysis = analyze(text)
    with pytest.raises(ActionError) as caught:
        VECTORIZE._plan(c.parse(text), analysis, analysis.kernel("lookup_kernel"))
    return str(caught.value)


def test_gathers_and_own_masks_are_masked_the_shared_scalar_is_not():
    assert {cand.params["BLOCK"] for cand in offered(GATHER)} == {256, 1024}
    new = apply_candidate(GATHER, offered(GATHER)[0], H100).new_text
    assert "    i = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)\n" in new
    assert "value = tl.load(table_ptr + token * dim + i % dim, mask=i < n_programs)" in new  # the gather
    assert "mask=(row < n_weights) & (i < n_programs), other=1.0)" in new
    assert "value * w * tl.load(scale_ptr), mask=i < n_programs)" in new  # one value for every program: no mask
    assert "grid = (triton.cdiv(ids.numel() * dim, 1024),)" in new
    assert "lookup_kernel[grid](ids, table, weight, scale, out, dim, weight.numel(), n_programs=ids.numel() * dim, BLOCK=1024)" in new


@pytest.mark.parametrize("change, why", [
    (("    tl.store(out_ptr + i,", "    if token > 3:\n        value = value * 2.0\n    tl.store(out_ptr + i,"),
     "branches or loops on a per-element value"),
    (("    tl.store(out_ptr + i, value * w * tl.load(scale_ptr))", "    tl.store(out_ptr + i, tl.sum(value * w))"),
     "tl.sum"),
    (("    row = i // dim\n", "    row = i // dim + tl.program_id(0) * 0\n"), "read once"),
    (("grid = (ids.numel() * dim,)", "grid = (ids.numel(), dim)"), "one axis"),
    (("    i = tl.program_id(axis=0)\n", "    i = tl.program_id(axis=0)\n    i = i + 0\n"), "more than once"),
    (("def lookup_kernel(ids_ptr,", "def lookup_kernel(BLOCK, ids_ptr,"), "already uses the name BLOCK"),
])
def test_refused_where_elements_mix_or_branch(change, why):
    text = GATHER.replace(*change)
    if change[0].startswith("def lookup_kernel"):
        text = text.replace("lookup_kernel[grid](ids,", "lookup_kernel[grid](0, ids,")
    assert text != GATHER
    assert why in why_refused(text)
    assert not offered(text)


def test_a_chain_consumer_after_a_reduction_is_left_to_the_row_fusions():
    """The suite's cross entropy: the per-row nll kernel reads the row statistics its producer wrote; row_fusion folds
    it into that producer once the sums are fused, which a vectorized nll kernel would stop."""
    text = GATHER.replace("    lookup_kernel[grid](", "    scale_kernel[(1,)](scale)\n    lookup_kernel[grid](").replace(
        "def lookup(ids,", "@triton.jit\ndef scale_kernel(s_ptr):\n    tl.store(s_ptr, tl.sum(tl.load(s_ptr + tl.arange(0, 2)), axis=0))\n\n\n"
        "def lookup(ids,")
    assert "reads scale, which scale_kernel is launched with first and reduces" in why_refused(text)


def _vectorized_then_fused() -> str:
    """Two one-element-per-program kernels through a buffer: each becomes a block kernel, then the elementwise fusion
    joins them (it needs blocks on both sides)."""
    text = kernel_path("one_per_program_chain").read_text()
    for kernel in ("scale_kernel", "relu_kernel"):
        (cand, *_) = [c for c in applicable(analyze(text), kernel, H100) if c.action == "vectorize"]
        text = apply_candidate(text, cand, H100).new_text
    fused = [c for c in applicable(analyze(text), "scale_kernel", H100) if c.action == "fusion"]
    assert fused and fused[0].params["consumer"] == "relu_kernel"
    return apply_candidate(text, fused[0], H100).new_text


def test_a_chain_of_elementwise_kernels_is_vectorized_link_by_link_then_fused():
    assert "relu_kernel" not in _vectorized_then_fused()


@pytest.mark.slow
def test_vectorized_gather_stays_equivalent(tmp_path):
    jobs = [job(tmp_path, "gather:reference", GATHER, GATHER, TOL_FP32, reference=True)]
    for cand in offered(GATHER):
        jobs.append(job(tmp_path, f"gather:vectorize{cand.params['BLOCK']}", GATHER,
                        apply_candidate(GATHER, cand, H100).new_text, TOL_FP32))
    chain = kernel_path("one_per_program_chain").read_text()
    jobs.append(job(tmp_path, "chain:vectorize+vectorize+fusion", chain,
                    _vectorized_then_fused(), TOL_FP32))
    results = run_jobs(jobs, tmp_path)
    assert len(results) == 4 and all(r["ok"] for r in results), [r for r in results if not r["ok"]]
