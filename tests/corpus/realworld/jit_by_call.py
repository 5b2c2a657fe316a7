"""Kernels jitted by a call instead of a decorator (``f = triton.jit(f)``), as some libraries write them."""
import triton
import triton.language as tl


def scale_rows(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


scale_rows = triton.jit(scale_rows)


def _shift(x_ptr, out_ptr, n, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + shift, mask=mask)


shift_kernel = triton.jit(do_not_specialize=["shift"])(_shift)


def _square(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * x, mask=mask)


square_kernel = triton.autotune(
    configs=[triton.Config({"BLOCK": 256}, num_warps=2), triton.Config({"BLOCK": 1024}, num_warps=4)],
    key=["n"],
)(triton.jit(_square))


def scale(x, factor):
    out = x.new_empty(x.shape)
    n = x.numel()
    scale_rows[(triton.cdiv(n, 128),)](x, out, n, factor, BLOCK=128)
    return out


def shift(x, value):
    out = x.new_empty(x.shape)
    n = x.numel()
    shift_kernel[(triton.cdiv(n, 128),)](x, out, n, value, BLOCK=128)
    return out


def square(x):
    out = x.new_empty(x.shape)
    n = x.numel()
    square_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out
