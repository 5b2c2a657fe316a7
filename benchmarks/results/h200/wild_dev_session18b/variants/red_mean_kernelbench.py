"""KernelBench level-1 mean over dim 1 of [batch, dim1, dim2]: one program per (batch, column), a loop down dim1."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 8
dim1 = 256
dim2 = 256


@triton.jit
def mean_dim1_kernel(x_ptr, out_ptr, D1, D2, n_rows, BLOCK: tl.constexpr, BLOCK_M: tl.constexpr):
    pid = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = pid < n_rows
    b = pid // D2
    j = pid % D2
    acc = tl.zeros([BLOCK_M, BLOCK], dtype=tl.float32)
    for start in range(0, D1, BLOCK):
        i = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + b[:, None] * D1 * D2 + i * D2 + j[:, None], mask=row_mask[:, None] & (i < D1), other=0.0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=1) / D1, mask=row_mask)


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=self.dim)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, D1, D2 = x.shape
        out = torch.empty((B, D2), device=x.device, dtype=x.dtype)
        BLOCK = 64
        BLOCK_M = max(1, min(8192 // BLOCK, triton.next_power_of_2(triton.cdiv(B * D2, 528))))
        mean_dim1_kernel[(triton.cdiv(B * D2, BLOCK_M),)](x, out, D1, D2, B * D2, BLOCK=BLOCK, BLOCK_M=BLOCK_M, num_warps=8 if BLOCK_M > 1 else 4)
        return out


def get_inputs(batch: int = batch_size, d1: int = dim1, d2: int = dim2):
    return [torch.randn(batch, d1, d2)]


def get_init_inputs():
    return [1]
