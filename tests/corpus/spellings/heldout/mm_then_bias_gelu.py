"""A matmul kernel, then a separate flat kernel that adds the bias (indexed by offs % N) and applies erf-GELU."""

import torch
import triton
import triton.language as tl

ENTRY = "linear_gelu"


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + offs_m[:, None] * K + (k + offs_k)[None, :],
                    mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + offs_k)[:, None] * N + offs_n[None, :],
                    mask=((k + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, y_ptr, total, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(bias_ptr + offs % N, mask=mask, other=0.0)
    h = x + b
    y = 0.5 * h * (1.0 + tl.erf(h * 0.7071067811865476))
    tl.store(y_ptr + offs, y, mask=mask)


def linear_gelu(a, b, bias):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    matmul_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](a, b, c, M, N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    out = torch.empty_like(c)
    bias_gelu_kernel[(triton.cdiv(M * N, 256),)](c, bias, out, M * N, N, BLOCK=256)
    return out


def get_inputs(device="cpu"):
    return [torch.randn(24, 40, device=device), torch.randn(40, 36, device=device) / 6, torch.randn(36, device=device)]


def reference(a, b, bias):
    return torch.nn.functional.gelu(a @ b + bias)
