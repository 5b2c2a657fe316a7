"""Batched matmul C[b] = A[b] @ B[b] in fp16: the batch on the third grid axis, small tiles, one stage."""

import torch
import triton
import triton.language as tl


def _tma_ready(tensor, unit_stride, *strides):
    """Whether TMA reads ``tensor`` as the kernel does: unit innermost stride, 16-byte-aligned base and strides."""
    return unit_stride == 1 and tensor.data_ptr() % 16 == 0 and all(
        stride * tensor.element_size() % 16 == 0 for stride in strides)


def _tma_allocator(size: int, alignment: int, stream):
    """Global memory for the device-side TMA descriptors."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


triton.set_allocator(_tma_allocator)


OP_CLASS = "matmul"  # groups kernels in the benchmark report


@triton.jit
def bmm_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_ab, stride_am, stride_ak,
    stride_bb, stride_bk, stride_bn,
    stride_cb, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_TMA: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_base = a_ptr + batch * stride_ab
    b_base = b_ptr + batch * stride_bb
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if USE_TMA:
        a_desc = tl.make_tensor_descriptor(a_base, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b_base, shape=[K, N], strides=[stride_bk, 1], block_shape=[BLOCK_K, BLOCK_N])
    for k in range(0, K, BLOCK_K):
        if USE_TMA:
            a = a_desc.load([pid_m * BLOCK_M, k])
            b = b_desc.load([k, pid_n * BLOCK_N])
        else:
            a = tl.load(
                a_base + offs_m[:, None] * stride_am + (k + offs_k)[None, :] * stride_ak,
                mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0,
            )
            b = tl.load(
                b_base + (k + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                mask=((k + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0,
            )
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
        num_warps=8, num_stages=3, USE_TMA=_tma_ready(a, a.stride(2), a.stride(1), a.stride(0)) and _tma_ready(b, b.stride(2), b.stride(1), b.stride(0)),
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
