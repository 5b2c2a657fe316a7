"""Sum along each row: one program per row walking it in small blocks."""

import torch
import triton
import triton.language as tl

OP_CLASS = "reduction"  # groups kernels in the benchmark report


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    row_ptr = x_ptr + row * row_stride
    total = 0.0
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(row_ptr + cols, mask=cols < n_cols, other=0.0)
        total += tl.sum(x, axis=0)
    tl.store(out_ptr + row, total)


def row_sum(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    out = torch.empty(n_rows, device=x.device, dtype=x.dtype)
    BLOCK_SIZE = 64
    row_sum_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
    return out


SIZES = {"cuda": {"rows": 32768, "cols": 4096}, "cpu": {"rows": 48, "cols": 200}}


def get_inputs(device: str = "cuda", rows: int | None = None, cols: int | None = None):
    size = SIZES["cpu" if str(device).startswith("cpu") else "cuda"]
    return [torch.randn(rows or size["rows"], cols or size["cols"], device=device, dtype=torch.float32)]


def eager(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=1)


def reference(x: torch.Tensor) -> torch.Tensor:
    return eager(x.double()).to(x.dtype)


def roofline_cost(x: torch.Tensor) -> dict:
    return {"bytes": (x.numel() + x.shape[0]) * x.element_size(), "flops": x.numel()}
