"""PLANTED FAULT: `from torch import empty` escapes a poisoner that patches torch.empty: the kernel skips the last block."""

import torch
from torch import empty
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
    out = empty(x.shape, device=x.device, dtype=x.dtype)
    n_elements = x.numel()
    BLOCK_SIZE = 32
    grid = (max(triton.cdiv(n_elements, BLOCK_SIZE) - 1, 1),)
    scale_add_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return out


def get_inputs(device: str = "cuda", n: int = 90):
    return [torch.randn(n, device=device, dtype=torch.float32), torch.randn(n, device=device, dtype=torch.float32)]


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 2.0 * x + y
