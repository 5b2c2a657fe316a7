"""RMSNorm forward in FlagGems' manner: @triton.autotune over the column block, two passes over the row, one program per row."""

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_N": 256}, num_warps=2),
        triton.Config({"BLOCK_N": 512}, num_warps=4),
        triton.Config({"BLOCK_N": 1024}, num_warps=8),
    ],
    key=["N"],
)
@triton.jit
def rms_norm_kernel(Y, X, W, y_stride_r, x_stride_r, N, eps, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    Y += pid * y_stride_r
    X += pid * x_stride_r

    _var = tl.zeros([BLOCK_N], dtype=tl.float32)
    for off in range(0, N, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rrms = 1 / tl.sqrt(var + eps)

    for off in range(0, N, BLOCK_N):
        cols = off + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=mask, other=0.0)
        y = (x * rrms).to(Y.dtype.element_ty) * w
        tl.store(Y + cols, y, mask=mask)


def rms_norm(x, weight, eps=1e-5):
    dim = x.shape[-1]
    x = x.contiguous().view(-1, dim)
    M, N = x.shape
    y = torch.empty_like(x)
    rms_norm_kernel[(M,)](y, x, weight, y.stride(0), x.stride(0), N, eps)
    return y.view(*x.shape[:-1], dim)


def get_inputs(device: str = "cuda", M: int = 16384, N: int = 1000):
    x = torch.randn(M, N, device=device, dtype=torch.float32)
    weight = torch.randn(N, device=device, dtype=torch.float32)
    return [x, weight, 1e-5]


def reference(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
