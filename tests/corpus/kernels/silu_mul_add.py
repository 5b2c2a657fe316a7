"""Three elementwise kernels chained through two buffers: silu(a), then * b, then + r (consumers with extra inputs)."""

import torch
import triton
import triton.language as tl

ENTRY = "silu_mul_add"


@triton.jit
def silu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x / (1.0 + tl.exp(-x)), mask=mask)


@triton.jit
def mul_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * y, mask=mask)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def silu_mul_add(a: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    n_elements = a.numel()
    act = torch.empty_like(a)
    prod = torch.empty_like(a)
    out = torch.empty_like(a)
    BLOCK_SIZE = 128
    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
    silu_kernel[grid](a, act, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    mul_kernel[grid](act, b, prod, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    add_kernel[grid](prod, r, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return out


def get_inputs(device: str = "cpu", n: int = 1000):
    return [torch.randn(n, device=device) for _ in range(3)]


def reference(a, b, r):
    return torch.nn.functional.silu(a) * b + r
