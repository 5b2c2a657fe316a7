# corpus: broken - a kernel in the middle of being typed (unclosed call, missing body)
import triton
import triton.language as tl


@triton.jit
def half_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, x, mask=

def wrapper(x, y):
    half_kernel[(1,)](x, y, x.numel(), BLOCK=
