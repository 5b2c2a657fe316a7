"""Dropout with a precomputed keep-mask (the tutorial's first version, before the seeded one)."""

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 2048}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 2048}, num_warps=8),
        triton.Config({"BLOCK_SIZE": 4096}, num_warps=8),
        triton.Config({"BLOCK_SIZE": 256}, num_warps=4),
    ],
    key=["n_elements"],
)
@triton.jit
def _dropout(x_ptr, x_keep_ptr, output_ptr, n_elements, p, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    x_keep = tl.load(x_keep_ptr + offsets, mask=mask)
    output = tl.where(x_keep != 0, x / (1 - p), 0.0)
    tl.store(output_ptr + offsets, output, mask=mask)


def dropout(x, x_keep, p):
    output = torch.empty_like(x)
    assert x.is_contiguous()
    n_elements = x.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
    _dropout[grid](x, x_keep, output, n_elements, p)
    return output


def get_inputs(device: str = "cuda", n: int = 1 << 24, p: float = 0.5):
    x = torch.randn(n, device=device, dtype=torch.float32)
    x_keep = (torch.rand(n, device=device) > p).to(torch.int32)
    return [x, x_keep, p]


def reference(x, x_keep, p):
    return torch.where(x_keep != 0, x / (1 - p), torch.zeros_like(x))


if __name__ == "__main__":
    x, keep, p = get_inputs(device="cuda", n=10)
    print(x, keep, dropout(x, keep, p), sep="\n")
