"""Matmul with @triton.heuristics deciding EVEN_K (skip the K mask when K divides), in the old-Triton-ops manner."""

import torch
import triton
import triton.language as tl


@triton.heuristics({
    "EVEN_K": lambda args: args["K"] % args["BLOCK_K"] == 0,
})
@triton.jit
def _kernel(A, B, C, M, N, K,
            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    A = A + (rm[:, None] * stride_am + rk[None, :] * stride_ak)
    B = B + (rk[:, None] * stride_bk + rn[None, :] * stride_bn)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A, mask=rm[:, None] < M, other=0.0)
            b = tl.load(B, mask=rn[None, :] < N, other=0.0)
        else:
            a = tl.load(A, mask=(rm[:, None] < M) & (rk[None, :] < k), other=0.0)
            b = tl.load(B, mask=(rk[:, None] < k) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk
    acc = acc.to(C.dtype.element_ty)
    C = C + (rm[:, None] * stride_cm + rn[None, :] * stride_cn)
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    tl.store(C, acc, mask=mask)


def matmul(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    _kernel[grid](a, b, c, M, N, K,
                  a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                  BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4)
    return c


def get_inputs(device: str = "cuda", M: int = 2048, N: int = 3072, K: int = 1000):
    a = torch.randn(M, K, device=device, dtype=torch.float16)
    b = torch.randn(K, N, device=device, dtype=torch.float16)
    return [a, b]


def reference(a, b):
    return (a.float() @ b.float()).to(a.dtype)


def eager(a, b):
    """The fp16 matmul a user calls."""
    return torch.matmul(a, b)
