"""Softmax with an online max/sum first pass and a second normalising pass, 128-wide blocks, one row per program."""

import torch
import triton
import triton.language as tl


@triton.jit
def online_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols, n_rows, BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr):
    row_idx = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = row_idx < n_rows
    row_start = input_ptr + row_idx * input_row_stride
    m = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    d = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(row_start[:, None] + offs[None, :], mask=row_mask[:, None] & (offs < n_cols), other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=1))
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new[:, None]), axis=1)
        m = m_new
    out_start = output_ptr + row_idx * output_row_stride
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(row_start[:, None] + offs[None, :], mask=row_mask[:, None] & (offs < n_cols), other=-float("inf"))
        tl.store(out_start[:, None] + offs[None, :], tl.exp(x - m[:, None]) / d[:, None], mask=row_mask[:, None] & (offs < n_cols))


def softmax(x):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    BLOCK_SIZE = 128
    BLOCK_M = max(1, min(8192 // BLOCK_SIZE, triton.next_power_of_2(triton.cdiv(n_rows, 528))))
    online_softmax_kernel[(triton.cdiv(n_rows, BLOCK_M),)](y, x, x.stride(0), y.stride(0), n_cols, n_rows, BLOCK_SIZE=BLOCK_SIZE, BLOCK_M=BLOCK_M, num_warps=8 if BLOCK_M > 1 else 4)
    return y


def get_inputs(device: str = "cuda", rows: int = 16384, cols: int = 6000):
    return [torch.randn(rows, cols, device=device)]


def reference(x):
    return torch.softmax(x, dim=-1)
