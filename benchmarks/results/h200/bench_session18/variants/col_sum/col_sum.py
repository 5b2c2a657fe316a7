"""Sum down each column: one program per column, walking the rows with a strided (uncoalesced) load."""

import torch
import triton
import triton.language as tl

ENTRY = "col_sum"  # the host function (the corpus tests read this file too)
OP_CLASS = "reduction"  # groups kernels in the benchmark report


@triton.jit
def col_sum_kernel(x_ptr, out_ptr, n_rows, row_stride, n_cols, BLOCK_SIZE: tl.constexpr, BLOCK_COLS: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_mask = cols < n_cols
    row_start = tl.program_id(1) * ROWS_PER_PROGRAM
    total = tl.zeros([BLOCK_COLS], dtype=tl.float32)
    for start in range(row_start, tl.minimum(row_start + ROWS_PER_PROGRAM, n_rows), BLOCK_SIZE):
        rows = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + rows[:, None] * row_stride + cols[None, :], mask=(rows[:, None] < n_rows) & col_mask[None, :], other=0.0)
        total += tl.sum(x, axis=0)
    tl.atomic_add(out_ptr + cols, total, mask=col_mask)


def col_sum(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    out = torch.zeros(n_cols, device=x.device, dtype=x.dtype)
    BLOCK_SIZE = 64
    BLOCK_COLS = 64
    ROWS_PER_PROGRAM = 1024
    col_sum_kernel[(triton.cdiv(n_cols, BLOCK_COLS), triton.cdiv(n_rows, ROWS_PER_PROGRAM))](x, out, n_rows, x.stride(0), n_cols, BLOCK_SIZE=BLOCK_SIZE, BLOCK_COLS=BLOCK_COLS, ROWS_PER_PROGRAM=ROWS_PER_PROGRAM, num_warps=4)
    return out


SIZES = {"cuda": {"rows": 32768, "cols": 4096}, "cpu": {"rows": 100, "cols": 37}}  # 37: a partial column block


def get_inputs(device: str = "cuda", rows: int | None = None, cols: int | None = None):
    size = SIZES["cpu" if str(device).startswith("cpu") else "cuda"]
    return [torch.randn(rows or size["rows"], cols or size["cols"], device=device, dtype=torch.float32)]


def eager(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=0)


def reference(x: torch.Tensor) -> torch.Tensor:
    return eager(x.double()).to(x.dtype)


def roofline_cost(x: torch.Tensor) -> dict:
    return {"bytes": (x.numel() + x.shape[1]) * x.element_size(), "flops": x.numel()}
