"""Column sum: one program per column walking the rows with a strided load (37 columns: a partial column block)."""

import torch
import triton
import triton.language as tl

ENTRY = "col_sum"


@triton.jit
def col_sum_kernel(x_ptr, out_ptr, n_rows, row_stride, BLOCK_SIZE: tl.constexpr):
    col = tl.program_id(0)
    total = 0.0
    for start in range(0, n_rows, BLOCK_SIZE):
        rows = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + rows * row_stride + col, mask=rows < n_rows, other=0.0)
        total += tl.sum(x, axis=0)
    tl.store(out_ptr + col, total)


def col_sum(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    out = torch.empty(n_cols, device=x.device, dtype=x.dtype)
    BLOCK_SIZE = 32
    col_sum_kernel[(n_cols,)](x, out, n_rows, x.stride(0), BLOCK_SIZE=BLOCK_SIZE)
    return out


def get_inputs(device: str = "cpu", rows: int = 100, cols: int = 37):
    return [torch.randn(rows, cols, device=device)]


def reference(x):
    return x.sum(dim=0)
