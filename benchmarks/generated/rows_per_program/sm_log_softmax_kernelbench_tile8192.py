"""KernelBench level-1 LogSoftmax over dim 1: ModelNew walks each row three times (max, sum, write) with a 256 block."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 4096
dim = 16384


@triton.jit
def log_softmax_kernel(x_ptr, y_ptr, n_cols, n_rows, BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr):
    row = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = row < n_rows
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    row_max = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_row[:, None] + cols[None, :], mask=row_mask[:, None] & (cols < n_cols), other=-float("inf"))
        row_max = tl.maximum(row_max, tl.max(x, axis=1))
    row_max = tl.max(row_max[:, None], axis=1)  # one read of the loop's result (Triton 3.6 asserts on more)
    total = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_row[:, None] + cols[None, :], mask=row_mask[:, None] & (cols < n_cols), other=-float("inf"))
        total += tl.sum(tl.exp(x - row_max[:, None]), axis=1)
    log_total = tl.log(total)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_row[:, None] + cols[None, :], mask=row_mask[:, None] & (cols < n_cols), other=0.0)
        tl.store(y_row[:, None] + cols[None, :], x - row_max[:, None] - log_total[:, None], mask=row_mask[:, None] & (cols < n_cols))


class Model(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=self.dim)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        BLOCK_SIZE = 256
        BLOCK_M = max(1, min(8192 // BLOCK_SIZE, triton.next_power_of_2(triton.cdiv(n_rows, 528))))
        log_softmax_kernel[(triton.cdiv(n_rows, BLOCK_M),)](x, y, n_cols, n_rows, BLOCK_SIZE=BLOCK_SIZE, BLOCK_M=BLOCK_M, num_warps=8 if BLOCK_M > 1 else 4)
        return y


def get_inputs(batch: int = batch_size, features: int = dim):
    return [torch.randn(batch, features)]


def get_init_inputs():
    return []
