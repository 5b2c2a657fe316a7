"""Two elementwise kernels and an intermediate buffer: y = x * w + b, then gelu(y)."""

import torch
import triton
import triton.language as tl

ENTRY = "gelu_bias"


@triton.jit
def scale_bias_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    w = tl.load(w_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    y = (x * w + b).to(y_ptr.dtype.element_ty)
    out = 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
    tl.store(y_ptr + offsets, out, mask=mask)


def gelu_bias(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    n_elements = x.numel()
    out = torch.empty_like(x)
    BLOCK_SIZE = 128
    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
    scale_bias_kernel[grid](x, w, b, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return out


def get_inputs(device: str = "cpu", n: int = 1000):
    return [torch.randn(n, device=device) for _ in range(3)]


def reference(x, w, b):
    return torch.nn.functional.gelu(x * w + b)
