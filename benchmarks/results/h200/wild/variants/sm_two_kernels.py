"""Softmax as two KernelBench kernels: row statistics (max, sum of exp) first, then a normalising pass."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 4096
dim = 4000


@triton.autotune(
    configs=[
        triton.Config({}, num_warps=2),
        triton.Config({}, num_warps=4),
        triton.Config({}, num_warps=8),
        triton.Config({}, num_warps=16),
        triton.Config({}, num_warps=32),
    ],
    key=["n_cols"],
)
@triton.jit
def row_stats_kernel(x_ptr, max_ptr, sum_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    m = tl.maximum(m, tl.max(x, axis=0))
    s = 0.0
    s += tl.sum(tl.exp(x - m), axis=0)
    tl.store(max_ptr + row, m)
    tl.store(sum_ptr + row, s)


@triton.jit
def normalize_kernel(x_ptr, max_ptr, sum_ptr, y_ptr, n_cols, n_rows, BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr):
    row = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = row < n_rows
    m = tl.load(max_ptr + row, mask=row_mask)
    s = tl.load(sum_ptr + row, mask=row_mask)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + row[:, None] * n_cols + cols[None, :], mask=row_mask[:, None] & (cols < n_cols), other=0.0)
        tl.store(y_ptr + row[:, None] * n_cols + cols[None, :], tl.exp(x - m[:, None]) / s[:, None], mask=row_mask[:, None] & (cols < n_cols))


class Model(nn.Module):
    """Softmax over dim 1."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        row_max = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        row_sum = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        y = torch.empty_like(x)
        row_stats_kernel[(n_rows,)](x, row_max, row_sum, n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols))
        BLOCK_SIZE = 512
        BLOCK_M = max(1, min(8192 // BLOCK_SIZE, triton.next_power_of_2(triton.cdiv(n_rows, 528))))
        normalize_kernel[(triton.cdiv(n_rows, BLOCK_M),)](x, row_max, row_sum, y, n_cols, n_rows, BLOCK_SIZE=BLOCK_SIZE, BLOCK_M=BLOCK_M, num_warps=8 if BLOCK_M > 1 else 4)
        return y


def get_inputs(batch: int = batch_size, features: int = dim):
    return [torch.randn(batch, features)]


def get_init_inputs():
    return []
