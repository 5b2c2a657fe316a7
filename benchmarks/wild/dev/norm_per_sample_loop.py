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
def _layer_norm_row(X, Y, W, B, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    diff = tl.where(mask, x - mean, 0.0)
    var = tl.sum(diff * diff, axis=0) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + cols, (diff * rstd * w + b).to(Y.dtype.element_ty), mask=mask)


def layer_norm_per_sample(x, weight, bias, eps: float = 1e-5):
    batch, tokens, hidden = x.shape
    y = torch.empty_like(x)
    BLOCK_SIZE = triton.next_power_of_2(hidden)
    num_warps = min(max(BLOCK_SIZE // 256, 1), 8)
    for b in range(batch):
        _layer_norm_row[(tokens,)](x[b], y[b], weight, bias, x.stride(1), hidden, eps, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return y


def get_inputs(device: str = "cuda", batch: int = 16, tokens: int = 1024, hidden: int = 1024):
    x = torch.randn(batch, tokens, hidden, device=device, dtype=torch.float16)
    weight = (torch.rand(hidden, device=device) + 0.5).to(torch.float16)
    bias = torch.randn(hidden, device=device, dtype=torch.float16)
    return [x, weight, bias]


def reference(x, weight, bias):
    return torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(), 1e-5).half()


def eager(x, weight, bias):
    """LayerNorm over the whole batch in the inputs' fp16."""
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5)
