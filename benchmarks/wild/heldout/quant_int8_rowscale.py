"""W8A8 matmul: int8 x int8 -> int32 with per-token and per-channel scales applied in the epilogue (fp16 out)."""

import torch
import triton
import triton.language as tl


@triton.jit
def int8_scaled_mm_kernel(a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr,
                          M, N, K,
                          stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] + k < K), other=0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] + k < K) & (offs_n[None, :] < N), other=0)
        acc += tl.dot(a, b)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    scale_a = tl.load(scale_a_ptr + offs_m, mask=offs_m < M, other=0.0)
    scale_b = tl.load(scale_b_ptr + offs_n, mask=offs_n < N, other=0.0)
    c = acc.to(tl.float32) * scale_a[:, None] * scale_b[None, :]
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, c.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def int8_scaled_mm(a, b, scale_a, scale_b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    int8_scaled_mm_kernel[grid](a, b, c, scale_a, scale_b, M, N, K,
                                a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                                BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=1)
    return c


def get_inputs(device: str = "cuda", M: int = 4096, N: int = 4096, K: int = 4096):
    a = torch.randint(-127, 128, (M, K), device=device, dtype=torch.int8)
    b = torch.randint(-127, 128, (K, N), device=device, dtype=torch.int8)
    scale_a = torch.rand(M, device=device, dtype=torch.float32) / 256
    scale_b = torch.rand(N, device=device, dtype=torch.float32) / 256
    return [a, b, scale_a, scale_b]


def reference(a, b, scale_a, scale_b):
    acc = a.double() @ b.double()
    return (acc * scale_a.double()[:, None] * scale_b.double()[None, :]).to(torch.float16)


def eager(a, b, scale_a, scale_b):
    """The int8 matmul a user calls (int32 accumulation), scaled in fp32 and stored as fp16."""
    return (torch._int_mm(a, b) * scale_a[:, None] * scale_b[None, :]).to(torch.float16)
