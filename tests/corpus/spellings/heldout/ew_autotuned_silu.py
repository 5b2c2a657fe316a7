"""An autotuned elementwise SiLU whose configs only try small blocks."""

import torch
import triton
import triton.language as tl

ENTRY = "silu"


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 128}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 256}, num_warps=4),
    ],
    key=["n_elements"],
)
@triton.jit
def silu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x * tl.sigmoid(x), mask=mask)


def silu(x):
    y = torch.empty_like(x)
    n = x.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    silu_kernel[grid](x, y, n)
    return y


def get_inputs(device="cpu"):
    return [torch.randn(3000, device=device)]


def reference(x):
    return torch.nn.functional.silu(x)
