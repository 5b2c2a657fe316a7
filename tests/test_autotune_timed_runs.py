"""The autotuner's timed runs must not change what the real run starts from.

On a GPU ``@triton.autotune`` times every config on the real arguments before the real run. A kernel that adds
into its output with atomics, or updates a buffer in place, then starts from what the timed runs left: autotune
adds ``restore_value`` for those pointers, and the interpreter's autotuner makes one timed run per key too, so the
CPU verifier sees the same wrong result a GPU would.
"""

from __future__ import annotations

import pytest

from mtmc_lsp.optimizer.actions import applicable, apply_candidate
from mtmc_lsp.optimizer.actions.autotune import rewritten_pointers
from mtmc_lsp.optimizer.analysis import analyze
from mtmc_lsp.optimizer.hardware import get_profile
from mtmc_lsp.optimizer.verify import VerifyOptions, verify_file

H100 = get_profile("h100")

SCATTER_ADD = '''import torch
import triton
import triton.language as tl


@triton.jit
def scatter_add_kernel(src_ptr, index_ptr, table_ptr, dim, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    target = tl.load(index_ptr + row)
    for start in range(0, dim, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < dim
        values = tl.load(src_ptr + row * dim + cols, mask=mask, other=0.0)
        tl.atomic_add(table_ptr + target * dim + cols, values, mask=mask)


def scatter_add(src, index, rows):
    table = torch.zeros(rows, src.shape[1], device=src.device, dtype=torch.float32)
    scatter_add_kernel[(src.shape[0],)](src, index, table, src.shape[1], BLOCK=64)
    return table


def get_inputs(device="cuda", tokens: int = 300, rows: int = 40, dim: int = 100):
    src = torch.randn(tokens, dim, device=device, dtype=torch.float32)
    index = torch.randint(0, rows, (tokens,), device=device, dtype=torch.int32)
    return [src, index, rows]


def reference(src, index, rows):
    table = torch.zeros(rows, src.shape[1], device=src.device, dtype=torch.float32)
    return table.index_add_(0, index.long(), src)
'''

IN_PLACE = '''import triton
import triton.language as tl


@triton.jit
def scale_in_place_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * 2.0, mask=offs < n)
    tl.store(out_ptr + offs, x, mask=offs < n)
'''


def _autotuned(text: str, kernel: str) -> str:
    (candidate,) = [c for c in applicable(analyze(text), kernel, H100) if c.action == "autotune"]
    return apply_candidate(text, candidate, H100).new_text


def test_pointers_a_run_rewrites():
    scatter, in_place = analyze(SCATTER_ADD), analyze(IN_PLACE)
    assert rewritten_pointers(scatter, scatter.kernel("scatter_add_kernel"), H100) == ["table_ptr"]  # not index_ptr
    assert rewritten_pointers(in_place, in_place.kernel("scale_in_place_kernel"), H100) == ["x_ptr"]  # not out_ptr


def test_autotune_restores_what_atomics_add_into():
    new = _autotuned(SCATTER_ADD, "scatter_add_kernel")
    assert '    key=["dim"],\n    restore_value=["table_ptr"],\n)' in new


@pytest.mark.slow
def test_the_interpreter_catches_a_missing_restore():
    new = _autotuned(SCATTER_ADD, "scatter_add_kernel")
    options = VerifyOptions(pool=None, mode="interpreter", compile_for_target=False, seeds=1)
    report = verify_file(new, SCATTER_ADD, "scatter.py", "h100", options)
    assert report.correct, report.summary
    missing = new.replace('    restore_value=["table_ptr"],\n', "")
    report = verify_file(missing, SCATTER_ADD, "scatter.py", "h100", options)
    assert report.status == "incorrect", report.summary

