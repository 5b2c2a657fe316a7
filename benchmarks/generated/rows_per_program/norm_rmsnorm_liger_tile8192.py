"""RMSNorm forward after Liger-Kernel: row pointer arithmetic with stride args, casting modes, rstd cache, fp32 compute."""

import torch
import triton
import triton.language as tl

_CASTING_MODE_NONE = tl.constexpr(-1)
_CASTING_MODE_LLAMA = tl.constexpr(0)


def calculate_settings(n):
    BLOCK_SIZE = triton.next_power_of_2(n)
    num_warps = 4
    if BLOCK_SIZE >= 32768:
        num_warps = 32
    elif BLOCK_SIZE >= 8192:
        num_warps = 16
    elif BLOCK_SIZE >= 2048:
        num_warps = 8
    return BLOCK_SIZE, num_warps


@triton.jit
def _rms_norm_forward_kernel(
    Y_ptr, Y_row_stride,
    X_ptr, X_row_stride,
    W_ptr, W_row_stride,
    RSTD_ptr, RSTD_row_stride,
    n_cols, eps, offset,
    n_rows,
    casting_mode: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    row_idx = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = row_idx < n_rows
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols

    Y_ptr += row_idx * Y_row_stride
    X_ptr += row_idx * X_row_stride
    RSTD_ptr += row_idx * RSTD_row_stride

    X_row = tl.load(X_ptr[:, None] + col_offsets[None, :], mask=row_mask[:, None] & mask, other=0)
    X_row_dtype = X_row.dtype
    W_row = tl.load(W_ptr + col_offsets, mask=mask, other=0)

    if casting_mode == _CASTING_MODE_LLAMA:
        X_row = X_row.to(tl.float32)

    mean_square = tl.sum(X_row * X_row, axis=1) / n_cols
    rstd = tl.math.rsqrt(mean_square + eps)
    tl.store(RSTD_ptr, rstd, mask=row_mask)

    X_row = X_row * rstd[:, None]
    if casting_mode == _CASTING_MODE_LLAMA:
        X_row = X_row.to(X_row_dtype)
    Y_row = X_row * (offset + W_row)
    tl.store(Y_ptr[:, None] + col_offsets[None, :], Y_row, mask=row_mask[:, None] & mask)


def rms_norm_forward(X, W, eps, offset=0.0, casting_mode=0):
    shape = X.shape
    dim = shape[-1]
    X = X.view(-1, dim)
    n_rows, n_cols = X.shape
    BLOCK_SIZE, num_warps = calculate_settings(n_cols)
    Y = torch.empty((n_rows, n_cols), dtype=X.dtype, device=X.device)
    RSTD = torch.empty(n_rows, dtype=torch.float32, device=X.device)
    BLOCK_M = max(1, min(8192 // BLOCK_SIZE, triton.next_power_of_2(triton.cdiv(n_rows, 528))))
    _rms_norm_forward_kernel[(triton.cdiv(n_rows, BLOCK_M),)](
        Y, Y.stride(0),
        X, X.stride(0),
        W, W.stride(0),
        RSTD, RSTD.stride(0),
        n_cols, eps, offset,
        n_rows,
        casting_mode,
        BLOCK_SIZE=BLOCK_SIZE,
        BLOCK_M=BLOCK_M, num_warps=8 if BLOCK_M > 1 else num_warps,
    )
    return Y.view(*shape)


def get_inputs(device: str = "cuda", batch: int = 4, seq_len: int = 2048, hidden: int = 4096):
    X = torch.randn(batch, seq_len, hidden, device=device, dtype=torch.float32)
    W = torch.randn(hidden, device=device, dtype=torch.float32)
    return [X, W, 1e-6]


def reference(X, W, eps):
    return X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + eps) * W
