"""contiguity reads the kernel model: offsets that are whole blocks plus tl.arange(0, BLOCK), however spelled."""

from __future__ import annotations

import pytest

from mtmc_lsp.optimizer.actions import apply_candidate
from mtmc_lsp.optimizer.actions.contiguity import ACTION
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile

H100 = get_profile("h100")
KERNEL = '''import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    start = pid * BLOCK
    offs = start + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
'''


def offered(text: str) -> list[str]:
    analysis = analyze(text)
    return [c.params["name"] for c in ACTION.candidates(analysis, analysis.kernel("copy_kernel"), H100)]


def test_the_block_start_named_first_is_read_through():
    assert offered(KERNEL) == ["offs"]
    new = apply_candidate(KERNEL, ACTION.candidates(analyze(KERNEL), analyze(KERNEL).kernel("copy_kernel"), H100)[0], H100)
    assert "    offs = start + tl.arange(0, BLOCK)\n    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)\n" \
        in new.new_text


@pytest.mark.parametrize("start", ["(pid + 1) * BLOCK - BLOCK", "2 * pid * BLOCK", "(pid // 2) * BLOCK", "BLOCK * (pid % 4)"])
def test_whole_blocks_in_any_spelling_are_offered(start):
    assert offered(KERNEL.replace("start = pid * BLOCK", f"start = {start}")) == ["offs"]


@pytest.mark.parametrize("old,new", [
    ("start = pid * BLOCK", "start = pid * BLOCK + 1"),  # not a multiple of the block
    ("start = pid * BLOCK", "start = pid * stride"),  # a row stride: the start's alignment is unknown
    ("start = pid * BLOCK", "start = pid * (BLOCK // 2)"),  # half blocks
    ("start = pid * BLOCK", "start = BLOCK"),  # the same offsets in every program: no program id
    ("    tl.store(", "    offs = offs + 1\n    tl.store("),  # bound twice
    ("    tl.store(", "    offs = tl.multiple_of(offs, BLOCK)\n    tl.store("),  # hints already there
    # a [BLOCK, 1] tile: the hints take one value per dimension (the interpreter refuses a scalar there)
    ("offs = start + tl.arange(0, BLOCK)", "offs = start + tl.arange(0, BLOCK)[:, None]"),
])
def test_offsets_that_are_not_whole_blocks_are_refused(old, new):
    text = KERNEL.replace(old, new, 1)
    assert text != KERNEL
    assert offered(text) == []
