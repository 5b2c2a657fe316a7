"""Atomics: a histogram with tl.atomic_add and a column sum accumulated across programs."""
import torch
import triton
import triton.language as tl


@triton.jit
def histogram_kernel(x_ptr, hist_ptr, n_elements, NUM_BINS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    values = tl.load(x_ptr + offsets, mask=mask, other=0)
    bins = tl.minimum(tl.maximum(values, 0), NUM_BINS - 1)
    tl.atomic_add(hist_ptr + bins, 1, mask=mask)


@triton.jit
def column_sum_kernel(x_ptr, out_ptr, n_rows, n_cols, stride, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    pid_r = tl.program_id(0)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_C)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    tile = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0)
    tl.atomic_add(out_ptr + cols, tl.sum(tile, axis=0), mask=cols < n_cols, sem="relaxed")


def histogram(x: torch.Tensor, num_bins: int = 256):
    hist = torch.zeros(num_bins, dtype=torch.int32, device=x.device)
    n = x.numel()
    histogram_kernel[(triton.cdiv(n, 1024),)](x, hist, n, NUM_BINS=num_bins, BLOCK=1024)
    return hist
