"""A test-style harness that calls .backward(): the verifier runs it as written, on the GPU
(benchmarks/verify_gpu.py) and in the interpreter (tests/test_verify_styles.py)."""

import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * factor, mask=m)


def launch(x, factor):
    out = torch.empty_like(x)
    block = 1024 if x.is_cuda else 64
    scale_kernel[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), factor, BLOCK=block)
    return out


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return launch(x, 2.0)

    @staticmethod
    def backward(ctx, grad):
        return launch(grad.contiguous(), 2.0)


def test_double_backward(device="cuda"):
    # A realistic size on a GPU, a tiny one in the interpreter.
    x = torch.randn(1 << 20 if str(device).startswith("cuda") else 300, device=device, requires_grad=True)
    y = Double.apply(x)
    (y * y).sum().backward()
    return y.detach(), x.grad
