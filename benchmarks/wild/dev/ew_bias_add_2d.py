"""Row-broadcast bias add on a 2-D fp16 activation: a 2-D grid of (row, column-block) programs."""

import torch
import triton
import triton.language as tl


@triton.jit
def bias_add_kernel(x_ptr, b_ptr, y_ptr, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    col_block = tl.program_id(1)
    cols = col_block * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * stride_ym + cols, x + b, mask=mask)


def bias_add(x, b):
    M, N = x.shape
    y = torch.empty_like(x)
    BLOCK_N = 64
    bias_add_kernel[(M, triton.cdiv(N, BLOCK_N))](x, b, y, N, x.stride(0), y.stride(0), BLOCK_N=BLOCK_N)
    return y


def get_inputs(device: str = "cuda", M: int = 8192, N: int = 5120):
    x = torch.randn(M, N, device=device, dtype=torch.float16)
    b = torch.randn(N, device=device, dtype=torch.float16)
    return [x, b]


def reference(x, b):
    return x + b
