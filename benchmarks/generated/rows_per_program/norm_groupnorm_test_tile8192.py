"""GroupNorm forward over [N, C, HW] (fp32), one program per (sample, group) looping over the group; test-style file."""

import torch
import triton
import triton.language as tl


@triton.jit
def group_norm_kernel(X, Y, W, B, C, HW, num_groups, eps, n_rows, BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr):
    pid = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = pid < n_rows
    n = pid // num_groups
    g = pid % num_groups
    group_size = (C // num_groups) * HW
    base = n * C * HW + g * group_size
    # mean
    _sum = tl.zeros([BLOCK_M, BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, group_size, BLOCK_SIZE):
        idx = off + tl.arange(0, BLOCK_SIZE)
        _sum += tl.load(X + base[:, None] + idx[None, :], mask=row_mask[:, None] & (idx < group_size), other=0.0)
    mean = tl.sum(_sum, axis=1) / group_size
    # variance
    _var = tl.zeros([BLOCK_M, BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, group_size, BLOCK_SIZE):
        idx = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + base[:, None] + idx[None, :], mask=row_mask[:, None] & (idx < group_size), other=0.0)
        x = tl.where(idx < group_size, x - mean[:, None], 0.0)
        _var += x * x
    rstd = 1 / tl.sqrt(tl.sum(_var, axis=1) / group_size + eps)
    # normalise with the per-channel affine
    for off in range(0, group_size, BLOCK_SIZE):
        idx = off + tl.arange(0, BLOCK_SIZE)
        mask = idx < group_size
        c = g[:, None] * (C // num_groups) + idx // HW
        x = tl.load(X + base[:, None] + idx[None, :], mask=row_mask[:, None] & mask, other=0.0)
        w = tl.load(W + c, mask=row_mask[:, None] & mask, other=1.0)
        b = tl.load(B + c, mask=row_mask[:, None] & mask, other=0.0)
        tl.store(Y + base[:, None] + idx[None, :], (x - mean[:, None]) * rstd[:, None] * w + b, mask=row_mask[:, None] & mask)


def group_norm(x, num_groups, weight, bias, eps=1e-5):
    N, C = x.shape[:2]
    HW = x[0, 0].numel()
    y = torch.empty_like(x)
    BLOCK_SIZE = 128
    BLOCK_M = max(1, min(8192 // BLOCK_SIZE, triton.next_power_of_2(triton.cdiv(N * num_groups, 528))))
    group_norm_kernel[(triton.cdiv(N * num_groups, BLOCK_M),)](x, y, weight, bias, C, HW, num_groups, eps, N * num_groups, BLOCK_SIZE=BLOCK_SIZE, BLOCK_M=BLOCK_M, num_warps=8 if BLOCK_M > 1 else 4)
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
