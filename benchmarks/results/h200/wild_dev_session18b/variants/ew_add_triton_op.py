"""An add exposed to torch.compile the way PyTorch's tutorial on user-defined Triton kernels shows it: a
``torch.library.triton_op`` whose body launches ``wrap_triton(kernel)[grid_fn](...)``, the block passed by position,
the grid a nested function of ``meta``."""

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 2048}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 2048}, num_warps=8),
        triton.Config({"BLOCK_SIZE": 4096}, num_warps=8),
        triton.Config({"BLOCK_SIZE": 4096}, num_warps=4),
    ],
    key=["n_elements"],
)
@triton.jit
def add_kernel(in_ptr0, in_ptr1, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(in_ptr0 + offsets, mask=mask)
    y = tl.load(in_ptr1 + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton_op("mtmc_wild::add", mutates_args={})
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    output = torch.empty_like(x)
    n_elements = output.numel()

    def grid_fn(meta):
        return (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)

    wrap_triton(add_kernel)[grid_fn](x, y, output, n_elements)
    return output


def get_inputs(device="cuda", n: int = 1 << 24):
    return [torch.randn(n, device=device), torch.randn(n, device=device)]


def reference(x, y):
    return x + y
