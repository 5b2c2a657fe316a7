"""sigmoid(a) * b + c as a chain of three one-op kernels, each with its own temporary (fusion target)."""

import torch
import triton
import triton.language as tl


@triton.jit
def sigmoid_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.sigmoid(x), mask=mask)


@triton.jit
def mul_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def sigmoid_mul_add(a, b, c):
    n = a.numel()
    s = torch.empty_like(a)
    m = torch.empty_like(a)
    out = torch.empty_like(a)
    grid = (triton.cdiv(n, 128),)
    sigmoid_kernel[grid](a, s, n, BLOCK=128)
    mul_kernel[grid](s, b, m, n, BLOCK=128)
    add_kernel[grid](m, c, out, n, BLOCK=128)
    return out


def get_inputs(device: str = "cuda", n: int = 50_000_000):
    return [torch.randn(n, device=device) for _ in range(3)]


def reference(a, b, c):
    return torch.sigmoid(a) * b + c
