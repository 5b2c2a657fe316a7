"""Tiled 2-D transpose (fp32) checked by test_* functions; run at module level like a quick script."""

import torch
import triton
import triton.language as tl

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def transpose_kernel(in_ptr, out_ptr, M, N, stride_im, stride_om, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tile = tl.load(in_ptr + rm[:, None] * stride_im + rn[None, :], mask=mask)
    tl.store(out_ptr + rn[None, :] * stride_om + rm[:, None], tile, mask=mask)


def transpose(x):
    M, N = x.shape
    out = torch.empty((N, M), device=x.device, dtype=x.dtype)
    transpose_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](x, out, M, N, x.stride(0), out.stride(0), BLOCK_M=16, BLOCK_N=16)
    return out


def test_transpose_square(device=DEVICE):
    x = torch.randn(64, 64, device=device)
    y = transpose(x)
    assert torch.equal(y, x.t())
    return y


def test_transpose_rect(device=DEVICE):
    x = torch.randn(50, 77, device=device)
    y = transpose(x)
    assert torch.equal(y, x.t())
    return y


test_transpose_square()
test_transpose_rect()
