"""RMSNorm as two kernels: per-row reciprocal RMS into a buffer, then a separate scaling kernel."""

import torch
import triton
import triton.language as tl

OP_CLASS = "normalization"  # groups kernels in the benchmark report


@triton.jit
def rms_kernel(x_ptr, n_cols, row_stride, eps, w_ptr, out_ptr, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    squares = 0.0
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * row_stride + cols, mask=cols < n_cols, other=0.0)
    squares += tl.sum(x * x, axis=0)
    rstd = (1.0 / tl.sqrt(squares / n_cols + eps)).to(tl.float32)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask)
    tl.store(out_ptr + row * row_stride + cols, x * rstd * w, mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    rms_kernel[(n_rows,)](x, n_cols, x.stride(0), 1e-6, weight, out, BLOCK_SIZE=triton.next_power_of_2(n_cols), num_warps=min(16, max(4, triton.next_power_of_2(n_cols) // 256)))
    return out


SIZES = {"cuda": {"rows": 32768, "cols": 4096}, "cpu": {"rows": 24, "cols": 300}}


def get_inputs(device: str = "cuda", rows: int | None = None, cols: int | None = None):
    size = SIZES["cpu" if str(device).startswith("cpu") else "cuda"]
    rows, cols = rows or size["rows"], cols or size["cols"]
    x = torch.randn(rows, cols, device=device, dtype=torch.float32)
    weight = 1.0 + 0.1 * torch.randn(cols, device=device, dtype=torch.float32)
    return [x, weight]


def eager(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, 1e-6)


def reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return eager(x.double(), weight.double()).to(x.dtype)


def roofline_cost(x: torch.Tensor, weight: torch.Tensor) -> dict:
    return {"bytes": (2 * x.numel() + x.shape[1]) * x.element_size(), "flops": 4 * x.numel()}
