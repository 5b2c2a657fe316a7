"""PLANTED FAULT: the candidate prints 64 MB to stdout and stderr on every call (the result is right: the checker must cope)."""

import sys

import torch
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


def scale_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    sys.stdout.write("x" * (32 << 20))
    sys.stderr.write("y" * (32 << 20))
    out = torch.empty_like(x)
    n_elements = x.numel()
    BLOCK_SIZE = 32
    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
    scale_add_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return out


def get_inputs(device: str = "cuda", n: int = 90):
    return [torch.randn(n, device=device, dtype=torch.float32), torch.randn(n, device=device, dtype=torch.float32)]


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 2.0 * x + y
