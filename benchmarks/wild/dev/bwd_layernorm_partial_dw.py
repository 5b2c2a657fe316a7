"""LayerNorm backward in the manner of Triton's layer-norm tutorial (05) and Liger-Kernel's layer_norm backward:
fp16 x/dy/weight, fp32 mean/rstd, fp32 math inside.

Kernel 1 runs one program per row: it computes dx from the saved mean/rstd and writes that row's dw and db
contributions (dy * xhat, dy) into a [rows, N] fp32 buffer. Kernel 2 sums those buffers over the rows into dw
and db, one program per 128-column strip walking the rows 32 at a time.

What makes it naive: one row per program with the whole row in one block; no GROUP_SIZE_M lock groups or
per-SM accumulation, so the partial buffers are as large as x and are written, then read back, in full
(the column sum is a second launch over 2 x rows x N floats); literal 32 x 128 tiles in the column sum.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _layer_norm_bwd_dx_partial(
    DX,  # pointer to the input gradient
    DY,  # pointer to the output gradient
    PDW,  # pointer to the per-row partial weight gradients
    PDB,  # pointer to the per-row partial bias gradients
    X,  # pointer to the input
    W,  # pointer to the weights
    Mean,  # pointer to the saved means
    Rstd,  # pointer to the saved 1/std
    stride,  # elements between two rows of X, DY and DX
    N,  # number of columns
    BLOCK_SIZE_N: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    PDW += row * N
    PDB += row * N
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = (x - mean) * rstd
    wdy = w * dy
    xhat = tl.where(mask, xhat, 0.0)
    wdy = tl.where(mask, wdy, 0.0)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    tl.store(DX + cols, dx.to(DX.dtype.element_ty), mask=mask)
    tl.store(PDW + cols, dy * xhat, mask=mask)
    tl.store(PDB + cols, dy, mask=mask)


@triton.jit
def _layer_norm_bwd_dwdb(
    PDW, PDB,  # [M, N] fp32 partials
    DW, DB,  # [N] outputs
    M, N,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
):
    pid = tl.program_id(0)
    cols = pid * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    acc_w = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    acc_b = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for start in range(0, M, BLOCK_SIZE_M):
        rows = start + tl.arange(0, BLOCK_SIZE_M)
        tile_mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        acc_w += tl.load(PDW + offs, mask=tile_mask, other=0.0)
        acc_b += tl.load(PDB + offs, mask=tile_mask, other=0.0)
    dw = tl.sum(acc_w, axis=0)
    db = tl.sum(acc_b, axis=0)
    tl.store(DW + cols, dw.to(DW.dtype.element_ty), mask=cols < N)
    tl.store(DB + cols, db.to(DB.dtype.element_ty), mask=cols < N)


def layer_norm_backward(x, dy, weight, mean, rstd):
    M, N = x.shape
    dx = torch.empty_like(x)
    partial_dw = torch.empty((M, N), dtype=torch.float32, device=x.device)
    partial_db = torch.empty((M, N), dtype=torch.float32, device=x.device)
    dw = torch.empty((N,), dtype=weight.dtype, device=weight.device)
    db = torch.empty((N,), dtype=weight.dtype, device=weight.device)
    BLOCK_SIZE_N = triton.next_power_of_2(N)
    num_warps = min(max(BLOCK_SIZE_N // 256, 1), 8)
    _layer_norm_bwd_dx_partial[(M,)](
        dx, dy, partial_dw, partial_db, x, weight, mean, rstd,
        x.stride(0), N,
        BLOCK_SIZE_N=BLOCK_SIZE_N, num_warps=num_warps,
    )
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_SIZE_N"]),)
    _layer_norm_bwd_dwdb[grid](partial_dw, partial_db, dw, db, M, N, BLOCK_SIZE_M=32, BLOCK_SIZE_N=128)
    return dx, dw, db


def get_inputs(device: str = "cuda", tokens: int = 16384, hidden: int = 1280):
    eps = 1e-5
    x = torch.randn(tokens, hidden, device=device, dtype=torch.float16)
    dy = torch.randn(tokens, hidden, device=device, dtype=torch.float16)
    weight = (torch.rand(hidden, device=device) + 0.5).to(torch.float16)
    xf = x.float()
    mean = xf.mean(dim=-1)
    rstd = torch.rsqrt(xf.var(dim=-1, unbiased=False) + eps)
    return [x, dy, weight, mean, rstd]


def reference(x, dy, weight, mean, rstd):
    with torch.enable_grad():  # the runners may call this under no_grad
        xf = x.float().requires_grad_(True)
        wf = weight.float().requires_grad_(True)
        bf = torch.zeros_like(wf).requires_grad_(True)
        y = torch.nn.functional.layer_norm(xf, (x.shape[-1],), wf, bf, 1e-5)
        dx, dw, db = torch.autograd.grad(y, (xf, wf, bf), dy.float())
    return dx.half(), dw.half(), db.half()


def eager(x, dy, weight, mean, rstd):
    """LayerNorm's backward from the saved statistics in the inputs' fp16, as PyTorch ops."""
    xhat = (x - mean[:, None].to(x.dtype)) * rstd[:, None].to(x.dtype)
    g = dy * weight
    dx = rstd[:, None].to(x.dtype) * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx, (dy * xhat).sum(0), dy.sum(0)
