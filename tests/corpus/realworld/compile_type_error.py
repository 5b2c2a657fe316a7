"""Parses fine, fails to compile: tl.dot on 1-D operands (a type error triton reports at that line)."""
import triton
import triton.language as tl


@triton.jit
def broken_dot(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    y = tl.dot(x, x)
    tl.store(out_ptr + offs, y, mask=offs < n)


def run(x, out):
    broken_dot[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
