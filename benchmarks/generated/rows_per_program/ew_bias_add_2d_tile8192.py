"""Row-broadcast bias add on a 2-D fp16 activation: a 2-D grid of (row, column-block) programs."""

import torch
import triton
import triton.language as tl


@triton.jit
def bias_add_kernel(x_ptr, b_ptr, y_ptr, N, stride_xm, stride_ym, n_rows, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    row = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = row < n_rows
    col_block = tl.program_id(1)
    cols = col_block * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row[:, None] * stride_xm + cols[None, :], mask=row_mask[:, None] & mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row[:, None] * stride_ym + cols[None, :], x + b, mask=row_mask[:, None] & mask)


def bias_add(x, b):
    M, N = x.shape
    y = torch.empty_like(x)
    BLOCK_N = 64
    BLOCK_M = max(1, min(8192 // BLOCK_N, triton.next_power_of_2(M), triton.next_power_of_2(triton.cdiv(M * triton.cdiv(N, BLOCK_N), 528))))
    bias_add_kernel[(triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))](x, b, y, N, x.stride(0), y.stride(0), M, BLOCK_N=BLOCK_N, BLOCK_M=BLOCK_M, num_warps=8 if BLOCK_M > 1 else 4)
    return y


def get_inputs(device: str = "cuda", M: int = 8192, N: int = 5120):
    x = torch.randn(M, N, device=device, dtype=torch.float16)
    b = torch.randn(N, device=device, dtype=torch.float16)
    return [x, b]


def reference(x, b):
    return x + b
