"""RMSNorm backward in unsloth's manner (its rms_layernorm backward): a calculate_settings helper picks BLOCK_SIZE
and num_warps, row pointers are moved in place (`X += row_idx * X_row_stride`), the saved inverse RMS is reloaded,
and dX = r/n * (n * dY*W - normed * sum(dY*W * normed)). fp16 dY/X/W, fp32 inverse RMS, fp32 math inside.

The weight gradient is not reduced in the kernel: each program also writes its row's dY * normed into a
[rows, n_cols] fp32 buffer and the host sums it with torch (`.sum(0)`).

What makes it naive: one row per program with the whole row in one block, the per-row dW products written out
in full (as large as X, in fp32) and reduced by a separate torch op, and the row's fp32 intermediates recomputed
from global loads rather than reused across rows.
"""

import torch
import triton
import triton.language as tl

MAX_FUSED_SIZE = 65536


def calculate_settings(n):
    BLOCK_SIZE = triton.next_power_of_2(n)
    if BLOCK_SIZE > MAX_FUSED_SIZE:
        raise RuntimeError(f"a row of {n} columns exceeds the fused block limit of {MAX_FUSED_SIZE}")
    num_warps = 4
    if BLOCK_SIZE >= 32768:
        num_warps = 32
    elif BLOCK_SIZE >= 8192:
        num_warps = 16
    elif BLOCK_SIZE >= 2048:
        num_warps = 8
    return BLOCK_SIZE, num_warps


@triton.jit
def _rms_layernorm_backward(
    dY, dY_row_stride,
    dX, dX_row_stride,
    dW_rows, dW_row_stride,
    X, X_row_stride,
    W, W_row_stride,
    r, r_row_stride,
    n_cols,
    BLOCK_SIZE: tl.constexpr,
):
    row_idx = tl.program_id(0)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols

    dY += row_idx * dY_row_stride
    dX += row_idx * dX_row_stride
    dW_rows += row_idx * dW_row_stride
    X += row_idx * X_row_stride
    r += row_idx * r_row_stride

    dY_row = tl.load(dY + col_offsets, mask=mask, other=0).to(tl.float32)
    X_row = tl.load(X + col_offsets, mask=mask, other=0).to(tl.float32)
    W_row = tl.load(W + col_offsets, mask=mask, other=0).to(tl.float32)

    inv_var = tl.load(r).to(tl.float32)
    normed = X_row * inv_var
    dY_W = dY_row * W_row
    rowsum_dY_normed = tl.sum(dY_W * normed, axis=0)
    output = inv_var / n_cols * (n_cols * dY_W - normed * rowsum_dY_normed)
    tl.store(dX + col_offsets, output.to(dX.dtype.element_ty), mask=mask)
    tl.store(dW_rows + col_offsets, dY_row * normed, mask=mask)


def rms_layernorm_backward(dY, X, W, r):
    shape = dY.shape
    dim = shape[-1]
    dY = dY.view(-1, dim)
    X = X.view(-1, dim)
    n_rows, n_cols = dY.shape
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    dX = torch.empty_like(dY)
    dW_rows = torch.empty((n_rows, n_cols), dtype=torch.float32, device=dY.device)
    _rms_layernorm_backward[(n_rows,)](
        dY, dY.stride(0),
        dX, dX.stride(0),
        dW_rows, dW_rows.stride(0),
        X, X.stride(0),
        W, W.stride(0),
        r, r.stride(0),
        n_cols,
        BLOCK_SIZE=BLOCK_SIZE,
        num_warps=num_warps,
    )
    dW = dW_rows.sum(dim=0).to(W.dtype)
    return dX.view(*shape), dW


def get_inputs(device: str = "cuda", batch: int = 4, seq_len: int = 4096, hidden: int = 5120):
    eps = 1e-6
    X = torch.randn(batch, seq_len, hidden, device=device, dtype=torch.float16)
    dY = torch.randn(batch, seq_len, hidden, device=device, dtype=torch.float16)
    W = (torch.rand(hidden, device=device) + 0.5).to(torch.float16)
    r = torch.rsqrt(X.float().pow(2).mean(-1) + eps).reshape(-1)
    return [dY, X, W, r]


def reference(dY, X, W, r):
    with torch.enable_grad():  # the runners may call this under no_grad
        xf = X.float().requires_grad_(True)
        wf = W.float().requires_grad_(True)
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * wf
        dx, dw = torch.autograd.grad(y, (xf, wf), dY.float())
    return dx.half(), dw.half()


def eager(dY, X, W, r):
    """RMSNorm's backward from the saved rstd in the inputs' fp16, as PyTorch ops."""
    rs = r.to(X.dtype).reshape(*X.shape[:-1], 1)
    xhat = X * rs
    g = dY * W
    dx = rs * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx, (dY * xhat).reshape(-1, X.shape[-1]).sum(0)
