"""An elementwise kernel whose grid repeats the block size as a literal: the name_block and launch-model target."""

import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


ENTRY = "scale"


def scale(x):
    out = torch.empty_like(x)
    n = x.numel()
    grid = ((n + 63) // 64,)
    scale_kernel[grid](x, out, n, 64)
    return out


def get_inputs(device="cpu"):
    return [torch.randn(1000, device=device)]


def reference(x):
    return 2.0 * x + 1.0
