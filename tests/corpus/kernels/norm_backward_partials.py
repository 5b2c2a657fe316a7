"""RMSNorm backward writing each row's weight-gradient terms to a [rows, N] workspace summed by torch (row_partials)."""

import torch
import triton
import triton.language as tl

ENTRY = "rms_norm_backward"


@triton.jit
def rms_bwd_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_rows_ptr, stride, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    dy_ptr += row * stride
    x_ptr += row * stride
    dy = tl.load(dy_ptr + cols, mask=mask, other=0.0)
    x = tl.load(x_ptr + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    rstd = tl.load(rstd_ptr + row)
    xhat = x * rstd
    dyw = dy * w
    dx = rstd * (dyw - xhat * tl.sum(dyw * xhat, axis=0) / N)
    tl.store(dx_ptr + row * stride + cols, dx, mask=mask)
    tl.store(dw_rows_ptr + row * N + cols, dy * xhat, mask=mask)


def rms_norm_backward(dy, x, w, rstd):
    M, N = x.shape
    dx = torch.empty_like(x)
    dw_rows = torch.empty((M, N), dtype=torch.float32, device=x.device)
    rms_bwd_kernel[(M,)](dy, x, w, rstd, dx, dw_rows, x.stride(0), N, BLOCK=triton.next_power_of_2(N))
    return dx, dw_rows.sum(dim=0)


def get_inputs(device="cpu"):
    x = torch.randn(37, 20, device=device)
    rstd = torch.rsqrt((x * x).mean(-1) + 1e-6)
    return [torch.randn(37, 20, device=device), x, torch.rand(20, device=device) + 0.5, rstd]


def reference(dy, x, w, rstd):
    xhat = x * rstd[:, None]
    dyw = dy * w
    dx = rstd[:, None] * (dyw - xhat * (dyw * xhat).sum(-1, keepdim=True) / x.shape[1])
    return dx, (dy * xhat).sum(0)
