"""Fusion of elementwise kernels however the consumer writes its loads, names and masks."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from mtmc_lsp.optimizer.actions import applicable, apply_candidate
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

sys.path.insert(0, str(Path(__file__).parent))
from test_actions_semantics import TOL_FP32, job, run_jobs  # noqa: E402

H100 = get_profile("h100")

# sigmoid(a) * b + c as three one-op kernels; the consumers load inline inside their stores.
CHAIN = '''import torch
import triton
import triton.language as tl

ENTRY = "sigmoid_mul_add"


@triton.jit
def sigmoid_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.sigmoid(x), mask=mask)


@triton.jit
def mul_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def add_kernel(a_ptr, b_ptr, c_ptr, size, BLOCK: tl.constexpr):
    """c = a + b, with its own names and the mask written inline."""
    pid = tl.program_id(axis=0)
    idx = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(c_ptr + idx, tl.load(a_ptr + idx, idx < size) + tl.load(b_ptr + idx, mask=idx < size), mask=idx < size)


def sigmoid_mul_add(a, b, c):
    n = a.numel()
    s = torch.empty_like(a)
    m = torch.empty_like(a)
    out = torch.empty_like(a)
    grid = (triton.cdiv(n, 128),)
    sigmoid_kernel[grid](a, s, n, BLOCK=128)
    mul_kernel[grid](s, b, m, n, BLOCK=128)
    add_kernel[grid](m, c, out, n, BLOCK=128)
    return out


def get_inputs(device="cpu"):
    return [torch.randn(1000, device=device) for _ in range(3)]


def reference(a, b, c):
    return torch.sigmoid(a) * b + c
'''


def fuse(text: str, producer: str, consumer: str) -> str:
    cand = next(c for c in applicable(analyze(text), producer, H100)
                if c.action == "fusion" and c.params == {"consumer": consumer} and c.kernel == producer)
    return apply_candidate(text, cand, H100).new_text


def test_inline_loads_in_the_store_are_fused():
    once = fuse(CHAIN, "sigmoid_kernel", "mul_kernel")
    assert "def mul_kernel" not in once
    assert "sigmoid_kernel[grid](a, m, n, b, BLOCK=128)" in once


def test_different_names_and_inline_masks_are_fused():
    twice = fuse(fuse(CHAIN, "sigmoid_kernel", "mul_kernel"), "sigmoid_kernel", "add_kernel")
    assert "def add_kernel" not in twice
    assert "sigmoid_kernel[grid](a, out, n, b, c, BLOCK=128)" in twice
    assert "idx" not in twice.split("def sigmoid_mul_add")[0]  # the consumer's names became the producer's


def test_a_mask_that_means_something_else_is_refused():
    other = CHAIN.replace("mask=idx < size), mask=idx < size)", "mask=idx < size - 1), mask=idx < size)")
    offered = [c for c in applicable(analyze(other), "mul_kernel", H100) if c.action == "fusion"]
    assert {c.params["consumer"] for c in offered} == {"mul_kernel"}  # mul -> add is refused, sigmoid -> mul stays


def test_a_gather_through_a_loaded_index_is_refused():
    gather = CHAIN.replace("tl.store(c_ptr + idx, tl.load(a_ptr + idx, idx < size) + tl.load(b_ptr + idx, mask=idx < size), mask=idx < size)",
                           "j = tl.load(a_ptr + idx, idx < size).to(tl.int32) % size\n"
                           "    tl.store(c_ptr + idx, tl.load(b_ptr + j, mask=idx < size), mask=idx < size)")
    assert not [c for c in applicable(analyze(gather), "mul_kernel", H100) if c.action == "fusion" and c.params["consumer"] == "add_kernel"]


# The consumer's output is allocated between the launches, next to some shape arithmetic.
INTERLEAVED = CHAIN.replace('''    s = torch.empty_like(a)
    m = torch.empty_like(a)
    out = torch.empty_like(a)
    grid = (triton.cdiv(n, 128),)
    sigmoid_kernel[grid](a, s, n, BLOCK=128)
    mul_kernel[grid](s, b, m, n, BLOCK=128)
''', '''    s = torch.empty_like(a)
    out = torch.empty_like(a)
    grid = (triton.cdiv(n, 128),)
    sigmoid_kernel[grid](a, s, n, BLOCK=128)
    m = torch.empty_like(a)
    rows = a.shape[0]
    mul_kernel[grid](s, b, m, n, BLOCK=128)
''')


def test_statements_between_the_launches_are_kept_and_the_fused_launch_moves_down():
    assert INTERLEAVED != CHAIN
    fused = fuse(INTERLEAVED, "sigmoid_kernel", "mul_kernel")
    assert "    m = torch.empty_like(a)\n    rows = a.shape[0]\n    sigmoid_kernel[grid](a, m, n, b, BLOCK=128)\n" in fused


@pytest.mark.parametrize("between", ["    a.mul_(2.0)\n", "    extra = torch.relu(a)\n", "    n = n - 1\n"])
def test_work_between_the_launches_refuses(between):
    text = CHAIN.replace("    mul_kernel[grid](s, b, m, n, BLOCK=128)\n", between + "    mul_kernel[grid](s, b, m, n, BLOCK=128)\n")
    assert not [c for c in applicable(analyze(text), "sigmoid_kernel", H100) if c.action == "fusion" and c.params["consumer"] == "mul_kernel"]


# The consumer loads into the name the producer's own load has (``x``).
SAME_NAMES = CHAIN.replace(
    "    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * tl.load(y_ptr + offs, mask=mask), mask=mask)\n",
    "    x = tl.load(x_ptr + offs, mask=mask)\n    tl.store(out_ptr + offs, x * tl.load(y_ptr + offs, mask=mask), mask=mask)\n")


def test_a_consumer_name_the_producer_binds_gets_a_fresh_one_and_the_result_fuses_again():
    assert SAME_NAMES != CHAIN
    once = fuse(SAME_NAMES, "sigmoid_kernel", "mul_kernel")
    kernel = ast.parse(once.split("@triton.jit")[1].split("\n\n\n")[0].strip())
    stored = [n.id for n in ast.walk(kernel) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    assert len(stored) == len(set(stored)), stored  # each name assigned once, as fusion's next step needs
    twice = fuse(once, "sigmoid_kernel", "add_kernel")
    assert [k.name for k in analyze(twice).kernels] == ["sigmoid_kernel"]


# The consumer spells out the grid the producer launches under through a name.
SPELLED_GRID = CHAIN.replace("    mul_kernel[grid](s, b, m, n, BLOCK=128)\n", "    mul_kernel[(triton.cdiv(n, 128),)](s, b, m, n, BLOCK=128)\n")


def test_a_named_grid_and_the_grid_it_names_are_one_grid():
    assert SPELLED_GRID != CHAIN
    fused = fuse(SPELLED_GRID, "sigmoid_kernel", "mul_kernel")
    assert "    sigmoid_kernel[grid](a, m, n, b, BLOCK=128)\n" in fused  # the named grid stays in use
    reversed_names = SPELLED_GRID.replace("sigmoid_kernel[grid](a, s, n, BLOCK=128)", "sigmoid_kernel[(triton.cdiv(n, 128),)](a, s, n, BLOCK=128)")
    reversed_names = reversed_names.replace("mul_kernel[(triton.cdiv(n, 128),)](s, b, m, n, BLOCK=128)", "mul_kernel[grid](s, b, m, n, BLOCK=128)")
    assert "    sigmoid_kernel[grid](a, m, n, b, BLOCK=128)\n" in fuse(reversed_names, "sigmoid_kernel", "mul_kernel")


@pytest.mark.parametrize("rebinding", ["    n = n + 0\n", "    grid = grid\n"], ids=["a name the grid reads", "the grid's name"])
def test_a_named_grid_whose_names_are_rebound_is_not_compared_by_meaning(rebinding):
    """``grid`` may then hold another value than its expression has at the other launch."""
    text = SPELLED_GRID.replace("    sigmoid_kernel[grid]", rebinding + "    sigmoid_kernel[grid]")
    assert not [c for c in applicable(analyze(text), "sigmoid_kernel", H100) if c.action == "fusion" and c.params["consumer"] == "mul_kernel"]


@pytest.mark.slow
def test_fused_chain_stays_equivalent(tmp_path):
    once = fuse(CHAIN, "sigmoid_kernel", "mul_kernel")
    twice = fuse(once, "sigmoid_kernel", "add_kernel")
    jobs = [job(tmp_path, "chain:reference", CHAIN, CHAIN, TOL_FP32, reference=True),
            job(tmp_path, "chain:fuse-mul", CHAIN, once, TOL_FP32),
            job(tmp_path, "chain:fuse-mul-add", CHAIN, twice, TOL_FP32),
            job(tmp_path, "chain:fuse-mul-add-into-mul", CHAIN, fuse(CHAIN, "mul_kernel", "add_kernel"), TOL_FP32),
            job(tmp_path, "interleaved:fuse-mul", INTERLEAVED, fuse(INTERLEAVED, "sigmoid_kernel", "mul_kernel"), TOL_FP32),
            job(tmp_path, "spelled-grid:fuse-mul", SPELLED_GRID, fuse(SPELLED_GRID, "sigmoid_kernel", "mul_kernel"), TOL_FP32),
            job(tmp_path, "same-names:fuse-mul-add", SAME_NAMES,
                fuse(fuse(SAME_NAMES, "sigmoid_kernel", "mul_kernel"), "sigmoid_kernel", "add_kernel"), TOL_FP32)]
    results = run_jobs(jobs, tmp_path)
    assert all(r["ok"] for r in results), results
