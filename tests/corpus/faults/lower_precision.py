"""PLANTED FAULT: the candidate quietly computes in float16 and returns float32 (errors near 1e-3, over fp32's 1e-4)."""

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
    tl.store(out_ptr + offsets, (2.0 * x.to(tl.float16) + y.to(tl.float16)).to(tl.float32), mask=mask)


def scale_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
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
