"""KernelBench-style int8 weight-only linear: ModelNew dequantises the weight in one kernel, then a Triton fp32 matmul."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 64
in_features = 256
out_features = 256


@triton.jit
def dequant_kernel(q_ptr, scale_ptr, w_ptr, K, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    q = tl.load(q_ptr + offs, mask=mask, other=0).to(tl.float32)
    s = tl.load(scale_ptr + offs // K, mask=mask, other=0.0)
    tl.store(w_ptr + offs, q * s, mask=mask)


@triton.jit
def matmul_wt_kernel(x_ptr, w_ptr, y_ptr, M, N, K,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + (k + rk)[:, None], mask=(rn[None, :] < N) & ((k + rk)[:, None] < K), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class Model(nn.Module):
    """y = x @ (q * scale)^T with an int8 weight q [out, in] and a per-output-channel scale."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.register_buffer("qweight", torch.randint(-127, 128, (out_features, in_features), dtype=torch.int8))
        self.register_buffer("scale", torch.rand(out_features) / 127)

    def forward(self, x):
        return x @ (self.qweight.float() * self.scale[:, None]).t()


class ModelNew(Model):
    def forward(self, x):
        x = x.contiguous()
        N, K = self.qweight.shape
        M = x.shape[0]
        w = torch.empty((N, K), device=x.device, dtype=torch.float32)
        n = N * K
        dequant_kernel[(triton.cdiv(n, 1024),)](self.qweight, self.scale, w, K, n, BLOCK_SIZE=1024)
        y = torch.empty((M, N), device=x.device, dtype=torch.float32)
        matmul_wt_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](x, w, y, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
        return y


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
