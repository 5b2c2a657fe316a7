"""Several kernels, module-level constants as block sizes, and a pipeline of launches."""
import torch
import triton
import triton.language as tl

BLOCK = 1024
ROWS_PER_PROGRAM: tl.constexpr = 4


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


@triton.jit
def bias_add_kernel(x_ptr, b_ptr, out_ptr, n_rows, n_cols, BLOCK_COLS: tl.constexpr):
    row0 = tl.program_id(0) * ROWS_PER_PROGRAM
    cols = tl.arange(0, BLOCK_COLS)
    cmask = cols < n_cols
    bias = tl.load(b_ptr + cols, mask=cmask)
    for r in range(ROWS_PER_PROGRAM):
        row = row0 + r
        mask = cmask & (row < n_rows)
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
        tl.store(out_ptr + row * n_cols + cols, x + bias, mask=mask)


@triton.jit
def sum_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n_elements, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(x, axis=0))


def pipeline(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    tmp = torch.empty_like(x)
    out = torch.empty_like(x)
    total = torch.zeros(1, device=x.device, dtype=torch.float32)
    bias_add_kernel[(triton.cdiv(n_rows, 4),)](x, b, tmp, n_rows, n_cols, BLOCK_COLS=triton.next_power_of_2(n_cols))
    relu_kernel[(triton.cdiv(x.numel(), BLOCK),)](tmp, out, x.numel(), BLOCK_SIZE=BLOCK)
    sum_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](out, total, x.numel(), BLOCK_SIZE=BLOCK)
    return out, total
