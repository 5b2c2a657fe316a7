"""y = x @ W^T with W in nn.Linear's [out, in] layout, read through strides (no transpose copy), fp16."""

import torch
import triton
import triton.language as tl


@triton.jit
def matmul_nt_kernel(x_ptr, w_ptr, y_ptr, M, N, K,
                     stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_n[None, :] * stride_wn + offs_k[:, None] * stride_wk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_remaining = K - k * BLOCK_K
        x = tl.load(x_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_remaining), other=0.0)
        w = tl.load(w_ptrs, mask=(offs_n[None, :] < N) & (offs_k[:, None] < k_remaining), other=0.0)
        acc = tl.dot(x, w, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def linear_nt(x, weight):
    M, K = x.shape
    N, K2 = weight.shape
    assert K == K2
    y = torch.empty((M, N), device=x.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 32))
    matmul_nt_kernel[grid](x, weight, y, M, N, K,
                           x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), y.stride(0), y.stride(1),
                           BLOCK_M=64, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=2)
    return y


def get_inputs(device: str = "cuda", tokens: int = 8192, in_features: int = 4096, out_features: int = 14336):
    x = torch.randn(tokens, in_features, device=device, dtype=torch.float16)
    w = torch.randn(out_features, in_features, device=device, dtype=torch.float16) / in_features ** 0.5
    return [x, w]


def reference(x, w):
    return (x.float() @ w.float().t()).half()


def eager(x, w):
    """The fp16 linear layer a user calls."""
    return torch.nn.functional.linear(x, w)
