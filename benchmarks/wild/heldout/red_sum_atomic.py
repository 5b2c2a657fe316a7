"""Sum of a whole tensor: each program reduces one block and atomically adds it into a scalar."""

import torch
import triton
import triton.language as tl


@triton.jit
def sum_atomic_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(x, axis=0))


def total_sum(x):
    out = torch.zeros(1, device=x.device, dtype=torch.float32)
    n = x.numel()
    sum_atomic_kernel[(triton.cdiv(n, 256),)](x, out, n, BLOCK_SIZE=256)
    return out


def get_inputs(device: str = "cuda", n: int = 1 << 26):
    return [torch.rand(n, device=device, dtype=torch.float32)]


def reference(x):
    return x.double().sum().float().reshape(1)


def eager(x):
    """The fp32 sum a user calls."""
    return x.sum().reshape(1)
