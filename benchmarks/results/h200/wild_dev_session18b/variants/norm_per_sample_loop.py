"""LayerNorm over the last dim of [batch, tokens, hidden] written the way a first port of a per-sample op often is:
a Python loop over the batch that launches the row kernel once per sample on ``x[b]``.

The row kernel is the Triton tutorial's fused LayerNorm forward (one row per program, the whole row in one
block, fp32 statistics, fp16 in and out). What makes it naive: the host loop launches 16 grids of 1024 programs
instead of one grid over every row, so each launch drains before the next starts and the GPU idles between them.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _layer_norm_row(X, Y, W, B, stride, N, eps, n_rows, BLOCK_SIZE: tl.constexpr, X_stride_b, Y_stride_b, BLOCK_M: tl.constexpr):
    pid_b = tl.program_id(1)
    X += pid_b.to(tl.int64) * X_stride_b
    Y += pid_b.to(tl.int64) * Y_stride_b
    row = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = row < n_rows
    X += row * stride
    Y += row * stride
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    x = tl.load(X[:, None] + cols[None, :], mask=row_mask[:, None] & mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / N
    diff = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(diff * diff, axis=1) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y[:, None] + cols[None, :], (diff * rstd[:, None] * w + b).to(Y.dtype.element_ty), mask=row_mask[:, None] & mask)


def layer_norm_per_sample(x, weight, bias, eps: float = 1e-5):
    batch, tokens, hidden = x.shape
    y = torch.empty_like(x)
    BLOCK_SIZE = triton.next_power_of_2(hidden)
    num_warps = min(max(BLOCK_SIZE // 256, 1), 8)
    BLOCK_M = max(1, min(4096 // BLOCK_SIZE, triton.next_power_of_2(tokens), triton.next_power_of_2(triton.cdiv(tokens * batch, 528))))
    _layer_norm_row[(triton.cdiv(tokens, BLOCK_M), batch)](x, y, weight, bias, x.stride(1), hidden, eps, tokens, BLOCK_SIZE=BLOCK_SIZE, BLOCK_M=BLOCK_M, num_warps=4 if BLOCK_M > 1 else num_warps, X_stride_b=x.stride(0), Y_stride_b=y.stride(0))
    return y


def get_inputs(device: str = "cuda", batch: int = 16, tokens: int = 1024, hidden: int = 1024):
    x = torch.randn(batch, tokens, hidden, device=device, dtype=torch.float16)
    weight = (torch.rand(hidden, device=device) + 0.5).to(torch.float16)
    bias = torch.randn(hidden, device=device, dtype=torch.float16)
    return [x, weight, bias]


def reference(x, weight, bias):
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(), 1e-5).half()
