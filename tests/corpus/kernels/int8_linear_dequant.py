"""An int8 weight dequantised by one kernel, then a linear layer that reads the fp32 weight: the prologue target."""

import torch
import triton
import triton.language as tl

ENTRY = "int8_linear"


@triton.jit
def dequant_kernel(q_ptr, scale_ptr, w_ptr, K, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    q = tl.load(q_ptr + offs, mask=mask, other=0).to(tl.float32)
    s = tl.load(scale_ptr + offs // K, mask=mask, other=0.0)
    tl.store(w_ptr + offs, q * s, mask=mask)


@triton.jit
def linear_kernel(x_ptr, w_ptr, y_ptr, M, N, K, stride_xm, stride_ym,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rm[:, None] * stride_xm + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + (k + rk)[:, None], mask=(rn[None, :] < N) & ((k + rk)[:, None] < K), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def int8_linear(x, qweight, scale):
    N, K = qweight.shape
    M = x.shape[0]
    w = torch.empty((N, K), device=x.device, dtype=torch.float32)
    n = N * K
    dequant_kernel[(triton.cdiv(n, 1024),)](qweight, scale, w, K, n, BLOCK_SIZE=1024)
    y = torch.empty((M, N), device=x.device, dtype=torch.float32)
    linear_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](x, w, y, M, N, K, x.stride(0), y.stride(0),
                                                            BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    return y


def get_inputs(device="cpu"):
    x = torch.randn(24, 40, device=device)
    qweight = torch.randint(-127, 128, (36, 40), device=device, dtype=torch.int8)
    scale = torch.rand(36, device=device) / 127
    return [x, qweight, scale]


def reference(x, qweight, scale):
    return x @ (qweight.float() * scale[:, None]).t()
