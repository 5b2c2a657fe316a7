"""A naive row softmax in Triton: three passes over each row with a small block."""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, n_rows, n_cols, in_row_stride, out_row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    row_in = in_ptr + row * in_row_stride
    row_out = out_ptr + row * out_row_stride
    # Pass 1: the row maximum.
    row_max = -float("inf")
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(row_in + cols, mask=cols < n_cols, other=-float("inf"))
        row_max = tl.maximum(row_max, tl.max(x, axis=0))
    # Pass 2: the sum of exponentials.
    denom = 0.0
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(row_in + cols, mask=cols < n_cols, other=-float("inf"))
        denom += tl.sum(tl.exp(x - row_max), axis=0)
    # Pass 3: normalise and store.
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(row_in + cols, mask=cols < n_cols, other=-float("inf"))
        tl.store(row_out + cols, tl.exp(x - row_max) / denom, mask=cols < n_cols)


def softmax(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    BLOCK_SIZE = 128
    softmax_kernel[(n_rows,)](y, x, n_rows, n_cols, x.stride(0), y.stride(0), BLOCK_SIZE=BLOCK_SIZE, num_warps=4)
    return y


# The harness (the verifier and the corpus tests read this one file): sizes by device, realistic on a
# GPU, tiny in the interpreter.
ENTRY = "softmax"
SIZES = {"cuda": {"rows": 256, "cols": 1000}, "cpu": {"rows": 8, "cols": 300}}


def get_inputs(device: str = "cuda", rows: int | None = None, cols: int | None = None):
    default = SIZES["cpu" if str(device).startswith("cpu") else "cuda"]
    return [torch.randn(rows or default["rows"], cols or default["cols"], device=device, dtype=torch.float32)]


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1).to(x.dtype)
