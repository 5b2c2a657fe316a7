"""A kernel whose output PyTorch post-processes elementwise (gelu), costing one more pass over memory."""

import torch
import triton
import triton.language as tl

ENTRY = "scaled_gelu"


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, alpha, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, alpha * x + y, mask=mask)


def scaled_gelu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n_elements = out.numel()
    BLOCK_SIZE = 256
    axpy_kernel[(triton.cdiv(n_elements, BLOCK_SIZE),)](x, y, out, 0.5, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return torch.nn.functional.gelu(out)


def get_inputs(device: str = "cpu", n: int = 1000):
    return [torch.randn(n, device=device), torch.randn(n, device=device)]


def reference(x, y):
    return torch.nn.functional.gelu(0.5 * x + y)
