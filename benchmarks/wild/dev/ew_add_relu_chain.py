"""x + y then ReLU as two separate kernels with a temporary in between (fusion has not happened yet)."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


def add_relu(x, y):
    n_elements = x.numel()
    tmp = torch.empty_like(x)
    out = torch.empty_like(x)
    grid = (triton.cdiv(n_elements, 256),)
    add_kernel[grid](x, y, tmp, n_elements, BLOCK_SIZE=256)
    relu_kernel[grid](tmp, out, n_elements, BLOCK_SIZE=256)
    return out


def get_inputs(device: str = "cuda", n: int = 1 << 25):
    return [torch.randn(n, device=device), torch.randn(n, device=device)]


def reference(x, y):
    return torch.relu(x + y)
