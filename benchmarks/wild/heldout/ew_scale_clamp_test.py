"""Scale-and-clamp written as a test file: pytest-style test_* functions, also run at module level."""

import torch
import triton
import triton.language as tl

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def scale_clamp_kernel(X, Y, N, scale, lo, hi, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < N, other=0.0)
    y = tl.minimum(tl.maximum(x * scale, lo), hi)
    tl.store(Y + offs, y, mask=offs < N)


def scale_clamp(x, scale, lo, hi):
    y = torch.empty_like(x)
    N = x.numel()
    scale_clamp_kernel[(triton.cdiv(N, 128),)](x, y, N, scale, lo, hi, BLOCK=128)
    return y


def test_scale_clamp_fp32(device=DEVICE):
    torch.manual_seed(0)
    x = torch.randn(3 * 1024 + 17, device=device)
    y = scale_clamp(x, 2.5, -1.0, 1.5)
    torch.testing.assert_close(y, torch.clamp(x * 2.5, -1.0, 1.5))
    return y


def test_scale_clamp_2d(device=DEVICE):
    torch.manual_seed(1)
    x = torch.randn(33, 257, device=device)
    y = scale_clamp(x, 0.5, -0.25, 0.25)
    torch.testing.assert_close(y, torch.clamp(x * 0.5, -0.25, 0.25))
    return y


test_scale_clamp_fp32()
test_scale_clamp_2d()
