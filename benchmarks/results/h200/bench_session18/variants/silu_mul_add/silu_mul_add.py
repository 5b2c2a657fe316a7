"""Elementwise chain silu(a) * b + r, written as three kernels with intermediate buffers."""

import torch
import triton
import triton.language as tl

ENTRY = "silu_mul_add"  # the host function (the corpus tests read this file too)
OP_CLASS = "elementwise"  # groups kernels in the benchmark report


@triton.jit
def silu_kernel(x_ptr, y_ptr, n_elements, b_ptr, r_ptr, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    x_1 = (x / (1.0 + tl.exp(-x))).to(y_ptr.dtype.element_ty)
    y = tl.load(b_ptr + offsets, mask=mask)
    x_2 = (x_1 * y).to(y_ptr.dtype.element_ty)
    y_1 = tl.load(r_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x_2 + y_1, mask=mask)


def silu_mul_add(a: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    n_elements = a.numel()
    out = torch.empty_like(a)
    BLOCK_SIZE = 4096
    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
    silu_kernel[grid](a, out, n_elements, b, r, BLOCK_SIZE=BLOCK_SIZE)
    return out


SIZES = {"cuda": {"n": 1 << 26}, "cpu": {"n": 1000}}


def get_inputs(device: str = "cuda", n: int | None = None):
    n = n or SIZES["cpu" if str(device).startswith("cpu") else "cuda"]["n"]
    return [torch.randn(n, device=device, dtype=torch.float32) for _ in range(3)]


def eager(a: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(a) * b + r


def reference(a: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    return eager(a.double(), b.double(), r.double()).to(a.dtype)


def roofline_cost(a: torch.Tensor, b: torch.Tensor, r: torch.Tensor) -> dict:
    n = a.numel()
    return {"bytes": 4 * n * a.element_size(), "flops": 6 * n}
