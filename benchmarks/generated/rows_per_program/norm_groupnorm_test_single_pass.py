"""GroupNorm forward over [N, C, HW] (fp32), one program per (sample, group) looping over the group; test-style file."""

import torch
import triton
import triton.language as tl


@triton.jit
def group_norm_kernel(X, Y, W, B, C, HW, num_groups, eps, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    n = pid // num_groups
    g = pid % num_groups
    group_size = (C // num_groups) * HW
    base = n * C * HW + g * group_size
    # mean
    _sum = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    idx = tl.arange(0, BLOCK_SIZE)
    _sum += tl.load(X + base + idx, mask=idx < group_size, other=0.0)
    mean = tl.sum(_sum, axis=0) / group_size
    # variance
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    x = tl.load(X + base + idx, mask=idx < group_size, other=0.0)
    x = tl.where(idx < group_size, x - mean, 0.0)
    _var += x * x
    rstd = 1 / tl.sqrt(tl.sum(_var, axis=0) / group_size + eps)
    # normalise with the per-channel affine
    mask = idx < group_size
    c = g * (C // num_groups) + idx // HW
    x = tl.load(X + base + idx, mask=mask, other=0.0)
    w = tl.load(W + c, mask=mask, other=1.0)
    b = tl.load(B + c, mask=mask, other=0.0)
    tl.store(Y + base + idx, (x - mean) * rstd * w + b, mask=mask)


def group_norm(x, num_groups, weight, bias, eps=1e-5):
    N, C = x.shape[:2]
    HW = x[0, 0].numel()
    y = torch.empty_like(x)
    group_norm_kernel[(N * num_groups,)](x, y, weight, bias, C, HW, num_groups, eps, BLOCK_SIZE=triton.next_power_of_2((C // num_groups) * HW), num_warps=min(16, max(4, triton.next_power_of_2((C // num_groups) * HW) // 256)))
    return y


def test_group_norm_2d(device="cuda"):
    torch.manual_seed(0)
    x = torch.randn(2, 16, 9, 7, device=device)
    w = torch.randn(16, device=device)
    b = torch.randn(16, device=device)
    y = group_norm(x, 4, w, b)
    torch.testing.assert_close(y, torch.nn.functional.group_norm(x, 4, w, b), atol=1e-4, rtol=1e-4)
    return y


def test_group_norm_1d(device="cuda"):
    torch.manual_seed(1)
    x = torch.randn(3, 32, 50, device=device)
    w = torch.randn(32, device=device)
    b = torch.randn(32, device=device)
    y = group_norm(x, 8, w, b)
    torch.testing.assert_close(y, torch.nn.functional.group_norm(x, 8, w, b), atol=1e-4, rtol=1e-4)
    return y
