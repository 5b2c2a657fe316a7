"""Reduction: the scaled sum of each row, looping over the row in blocks (the scale is re-read per block)."""

import torch
import triton
import triton.language as tl

ENTRY = "row_sum"


@triton.jit
def row_sum_kernel(x_ptr, scale_ptr, out_ptr, n_cols, stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        scale = tl.load(scale_ptr)
        acc += scale * tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def row_sum(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    out = torch.empty(n_rows, device=x.device, dtype=torch.float32)
    row_sum_kernel[(n_rows,)](x, scale, out, n_cols, x.stride(0), BLOCK_SIZE=64)
    return out


def get_inputs(device: str = "cpu", rows: int = 16, cols: int = 300):
    return [torch.randn(rows, cols, device=device), torch.rand(1, device=device) + 0.5]


def reference(x, scale):
    return x.sum(dim=1) * scale
