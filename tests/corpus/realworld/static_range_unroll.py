"""Compile-time unrolled loops with tl.static_range, and tl.constexpr arithmetic."""
import triton
import triton.language as tl

UNROLL = 4


@triton.jit
def unrolled_scale(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr, UNROLL_FACTOR: tl.constexpr = UNROLL):
    base = tl.program_id(0) * BLOCK * UNROLL_FACTOR
    for i in tl.static_range(UNROLL_FACTOR):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(y_ptr + offs, x * scale, mask=mask)


@triton.jit
def polynomial(x_ptr, out_ptr, n, DEGREE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for d in tl.static_range(DEGREE + 1):
        acc = acc * x + (d + 1)
    tl.store(out_ptr + offs, acc, mask=mask)


def scale(x, y, s):
    n = x.numel()
    unrolled_scale[(triton.cdiv(n, 256 * UNROLL),)](x, y, n, s, BLOCK=256)
    polynomial[(triton.cdiv(n, 512),)](x, y, n, DEGREE=3, BLOCK=512)
