"""Batched matmul: program axis 2 walks the batch."""

import torch
import triton
import triton.language as tl

ENTRY = "bmm"


@triton.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_base = a_ptr + batch * M * K
    b_base = b_ptr + batch * K * N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_base + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_base + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + batch * M * N + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    batch, M, K = a.shape
    N = b.shape[2]
    c = torch.empty((batch, M, N), device=a.device, dtype=torch.float16)
    BLOCK_M = 16
    BLOCK_N = 16
    BLOCK_K = 16
    bmm_kernel[(triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N), batch)](a, b, c, M, N, K, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return c


def get_inputs(device: str = "cpu", batch: int = 3, m: int = 24, n: int = 40, k: int = 32):
    return [torch.randn(batch, m, k, device=device, dtype=torch.float16), torch.randn(batch, k, n, device=device, dtype=torch.float16)]


def reference(a, b):
    return (a.float() @ b.float()).half()
