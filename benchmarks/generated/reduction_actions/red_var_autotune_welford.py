"""Row variance (unbiased) in FlagGems' manner: @triton.autotune over the column block, two passes, META-lambda grid."""

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_N": 64}, num_warps=2),
        triton.Config({"BLOCK_N": 128}, num_warps=4),
    ],
    key=["N"],
)
@triton.jit
def var_kernel(X, Out, M, N, correction, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    X = X + pid * N
    _sum = tl.zeros([BLOCK_N], dtype=tl.float32)
    _acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    count = tl.zeros([BLOCK_N], dtype=tl.float32)
    for off in range(0, N, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        count += tl.where(cols < N, 1.0, 0.0)
        delta = tl.where(cols < N, x - _sum, 0.0)
        _sum += delta / tl.maximum(count, 1.0)
        _acc += delta * tl.where(cols < N, x - _sum, 0.0)
    mean = tl.sum(_sum * count, axis=0) / N
    _acc += count * (_sum - mean) * (_sum - mean)
    tl.store(Out + pid, tl.sum(_acc, axis=0) / (N - correction))


def var_rows(x, correction=1):
    M, N = x.shape
    out = torch.empty(M, device=x.device, dtype=torch.float32)
    grid = lambda META: (M,)
    var_kernel[grid](x, out, M, N, correction)
    return out


def get_inputs(device: str = "cuda", M: int = 16384, N: int = 3000):
    return [torch.randn(M, N, device=device) * 3 + 1]


def reference(x):
    return torch.var(x, dim=1, correction=1)
