"""KernelBench level-1 LogSoftmax over dim 1: ModelNew walks each row three times (max, sum, write) with a 256 block."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 4096
dim = 16384


@triton.jit
def log_softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    row_max = -float("inf")
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf"))
    row_max = tl.maximum(row_max, tl.max(x, axis=0))
    total = 0.0
    total += tl.sum(tl.exp(x - row_max), axis=0)
    log_total = tl.log(total)
    x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0)
    tl.store(y_row + cols, x - row_max - log_total, mask=cols < n_cols)


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
        log_softmax_kernel[(n_rows,)](x, y, n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols), num_warps=min(16, max(4, triton.next_power_of_2(n_cols) // 256)))
        return y


def get_inputs(batch: int = batch_size, features: int = dim):
    return [torch.randn(batch, features)]


def get_init_inputs():
    return []
