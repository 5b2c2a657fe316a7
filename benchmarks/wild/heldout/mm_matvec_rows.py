"""Matrix-vector product (KernelBench level-1 style): one program per output row, a small K block."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

M = 4096
K = 8192


@triton.jit
def matvec_kernel(a_ptr, x_ptr, y_ptr, K, stride_am, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK_K], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + row * stride_am + offs, mask=offs < K, other=0.0)
        x = tl.load(x_ptr + offs, mask=offs < K, other=0.0)
        acc += a.to(tl.float32) * x.to(tl.float32)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


class Model(nn.Module):
    """y = A @ x for a (M, K) matrix and a (K, 1) vector."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A.float(), B.float())


def eager(A, B):
    """The fp16 matrix-vector product a user calls."""
    return torch.matmul(A, B)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        A = A.contiguous()
        rows, cols = A.shape
        y = torch.empty((rows, 1), device=A.device, dtype=torch.float32)
        matvec_kernel[(rows,)](A, B, y, cols, A.stride(0), BLOCK_K=64)
        return y


def get_inputs(m: int = M, k: int = K):
    A = torch.randn(m, k, dtype=torch.float16)
    B = torch.randn(k, 1, dtype=torch.float16)
    return [A, B]


def get_init_inputs():
    return []
