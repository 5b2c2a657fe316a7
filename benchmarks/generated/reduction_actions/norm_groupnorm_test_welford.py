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
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    count = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, group_size, BLOCK_SIZE):
        idx = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + base + idx, mask=idx < group_size, other=0.0)
        count += tl.where(idx < group_size, 1.0, 0.0)
        delta = tl.where(idx < group_size, x - _sum, 0.0)
        _sum += delta / tl.maximum(count, 1.0)
        _var += delta * tl.where(idx < group_size, x - _sum, 0.0)
    mean = tl.sum(_sum * count, axis=0) / group_size
    # variance
    _var += count * (_sum - mean) * (_sum - mean)
    rstd = 1 / tl.sqrt(tl.sum(_var, axis=0) / group_size + eps)
    # normalise with the per-channel affine
    for off in range(0, group_size, BLOCK_SIZE):
        idx = off + tl.arange(0, BLOCK_SIZE)
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
    group_norm_kernel[(N * num_groups,)](x, y, weight, bias, C, HW, num_groups, eps, BLOCK_SIZE=128)
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
