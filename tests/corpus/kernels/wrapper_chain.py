"""A SiLU-style gate written as one host wrapper per kernel, composed through a name: sigmoid(g) * x."""

import torch
import triton
import triton.language as tl

ENTRY = "gated"


@triton.jit
def sigmoid_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, 1.0 / (1.0 + tl.exp(-x)), mask=mask)


@triton.jit
def mul_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a * b, mask=mask)


def sigmoid(x):
    """Elementwise logistic function."""
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, 128),)
    sigmoid_kernel[grid](x, out, n, BLOCK=128)
    return out


def mul(a, b):
    out = torch.empty_like(a)
    n = a.numel()
    grid = (triton.cdiv(n, 128),)
    mul_kernel[grid](a, b, out, n, BLOCK=128)
    return out


def gated(x, g):
    s = sigmoid(g)
    return mul(s, x)


def get_inputs(device: str = "cpu", n: int = 1000):
    return [torch.randn(n, device=device), torch.randn(n, device=device)]


def reference(x, g):
    return torch.sigmoid(g) * x
