"""Sum along each row: one program per row walking it in small blocks."""

import torch
import triton
import triton.language as tl

OP_CLASS = "reduction"  # groups kernels in the benchmark report


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, row_stride, n_rows, BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr):
    row = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = row < n_rows
    row_ptr = x_ptr + row * row_stride
    total = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(row_ptr[:, None] + cols[None, :], mask=row_mask[:, None] & (cols < n_cols), other=0.0)
        total += tl.sum(x, axis=1)
    tl.store(out_ptr + row, total, mask=row_mask)


def row_sum(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    out = torch.empty(n_rows, device=x.device, dtype=x.dtype)
    BLOCK_SIZE = 256
    BLOCK_M = max(1, min(8192 // BLOCK_SIZE, triton.next_power_of_2(triton.cdiv(n_rows, 528))))
    row_sum_kernel[(triton.cdiv(n_rows, BLOCK_M),)](x, out, n_cols, x.stride(0), n_rows, BLOCK_SIZE=BLOCK_SIZE, BLOCK_M=BLOCK_M, num_warps=8 if BLOCK_M > 1 else 4)
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
