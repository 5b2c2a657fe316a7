"""C = A^T @ B with A stored as [K, M]: the A tile is read [BLOCK_K, BLOCK_M] and transposed for the dot."""

import torch
import triton
import triton.language as tl

ENTRY = "matmul_at"


@triton.jit
def matmul_at_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_ak, stride_am, stride_bk, stride_bn, stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        at = tl.load(a_ptr + kk[:, None] * stride_ak + rm[None, :] * stride_am,
                     mask=(kk[:, None] < K) & (rm[None, :] < M), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(tl.trans(at), b)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul_at(a, b):
    K, M = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    matmul_at_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    return c


def get_inputs(device="cpu"):
    return [torch.randn(40, 24, device=device), torch.randn(40, 36, device=device)]


def reference(a, b):
    return a.t() @ b
