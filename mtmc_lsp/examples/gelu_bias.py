"""gelu(x * w + b) written as two elementwise kernels with an intermediate buffer."""

import torch
import triton
import triton.language as tl


@triton.jit
def scale_bias_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    w = tl.load(w_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x * w + b, mask=mask)


@triton.jit
def gelu_kernel(y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    y = tl.load(y_ptr + offsets, mask=mask)
    out = 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
    tl.store(out_ptr + offsets, out, mask=mask)


def gelu_bias(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    n_elements = x.numel()
    y = torch.empty_like(x)
    out = torch.empty_like(x)
    BLOCK_SIZE = 128
    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
    scale_bias_kernel[grid](x, w, b, y, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    gelu_kernel[grid](y, out, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return out


# The harness (the verifier and the corpus tests read this one file): sizes by device, realistic on a
# GPU, tiny in the interpreter.
ENTRY = "gelu_bias"
SIZES = {"cuda": {"n": 1 << 16}, "cpu": {"n": 1000}}


def get_inputs(device: str = "cuda", n: int | None = None):
    n = n or SIZES["cpu" if str(device).startswith("cpu") else "cuda"]["n"]
    return [torch.randn(n, device=device, dtype=torch.float32) for _ in range(3)]


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x.double() * w.double() + b.double()).to(x.dtype)
