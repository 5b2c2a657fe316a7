"""Batched matmul C[b] = A[b] @ B[b] in fp16: the batch on the third grid axis, small tiles, one stage."""

import torch
import triton
import triton.language as tl

OP_CLASS = "matmul"  # groups kernels in the benchmark report


@triton.jit
def bmm_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_ab, stride_am, stride_ak,
    stride_bb, stride_bk, stride_bn,
    stride_cb, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_base = a_ptr + batch * stride_ab
    b_base = b_ptr + batch * stride_bb
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a_ptrs = a_base + offs_am[:, None] * stride_am + (k + offs_k)[None, :] * stride_ak
        b_ptrs = b_base + (k + offs_k)[:, None] * stride_bk + offs_bn[None, :] * stride_bn
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            a = tl.load(a_ptrs, mask=(k + offs_k)[None, :] < K, other=0.0)
            b = tl.load(b_ptrs, mask=(k + offs_k)[:, None] < K, other=0.0)
        acc += tl.dot(a, b)
    tl.store(
        c_ptr + batch * stride_cb + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
        acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N),
    )


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    B, M, K = a.shape
    B2, K2, N = b.shape
    assert B == B2 and K == K2, "batch or inner dimensions differ"
    c = torch.empty((B, M, N), device=a.device, dtype=a.dtype)
    BLOCK_M = 128
    BLOCK_N = 256
    BLOCK_K = 64
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N), B)
    bmm_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), a.stride(2),
        b.stride(0), b.stride(1), b.stride(2),
        c.stride(0), c.stride(1), c.stride(2),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        num_warps=8, num_stages=3, EVEN_K=K % BLOCK_K == 0,
    )
    return c


SIZES = {"cuda": {"batch": 16, "m": 2048, "n": 2048, "k": 2048}, "cpu": {"batch": 3, "m": 48, "n": 64, "k": 40}}


def get_inputs(device: str = "cuda", batch: int | None = None, m: int | None = None, n: int | None = None,
               k: int | None = None):
    size = SIZES["cpu" if str(device).startswith("cpu") else "cuda"]
    batch, m, n, k = batch or size["batch"], m or size["m"], n or size["n"], k or size["k"]
    a = torch.randn(batch, m, k, device=device, dtype=torch.float16)
    b = torch.randn(batch, k, n, device=device, dtype=torch.float16)
    return [a, b]


def eager(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a, b)


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.bmm(a.float(), b.float()).to(a.dtype)


def roofline_cost(a: torch.Tensor, b: torch.Tensor) -> dict:
    (batch, m, k), n = a.shape, b.shape[2]
    return {"bytes": batch * (m * k + k * n + m * n) * a.element_size(), "flops": 2 * batch * m * n * k}
