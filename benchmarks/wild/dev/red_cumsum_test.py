"""Inclusive cumulative sum along rows with tl.cumsum, the whole row in one block; a test-style file."""

import torch
import triton
import triton.language as tl


@triton.jit
def cumsum_kernel(x_ptr, y_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    y = tl.cumsum(x, axis=0)
    tl.store(y_ptr + row * n_cols + cols, y, mask=mask)


def cumsum_rows(x):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    cumsum_kernel[(n_rows,)](x, y, n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return y


def test_cumsum_short_rows(device="cuda"):
    x = torch.randn(17, 100, device=device)
    y = cumsum_rows(x)
    torch.testing.assert_close(y, torch.cumsum(x, dim=1), rtol=1e-4, atol=1e-4)
    return y


def test_cumsum_long_rows(device="cuda"):
    x = torch.rand(9, 1000, device=device)
    y = cumsum_rows(x)
    torch.testing.assert_close(y, torch.cumsum(x, dim=1), rtol=1e-4, atol=1e-3)
    return y
