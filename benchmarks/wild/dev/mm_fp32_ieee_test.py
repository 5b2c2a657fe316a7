"""An fp32 matmul pinned to IEEE precision (no TF32), tested by test_* functions at several odd shapes."""

import torch
import triton
import triton.language as tl


@triton.jit
def sgemm_kernel(A, B, C, M, N, K, lda, ldb, ldc,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(A + rm[:, None] * lda + (k0 + rk)[None, :], mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(B + (k0 + rk)[:, None] * ldb + rn[None, :], mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(C + rm[:, None] * ldc + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def sgemm(a, b):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty(M, N, device=a.device, dtype=torch.float32)
    sgemm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0),
                                                           BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    return c


def test_sgemm_square(device="cuda"):
    torch.manual_seed(0)
    a = torch.randn(96, 80, device=device)
    b = torch.randn(80, 64, device=device)
    c = sgemm(a, b)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    return c


def test_sgemm_ragged(device="cuda"):
    torch.manual_seed(1)
    a = torch.randn(77, 45, device=device)
    b = torch.randn(45, 50, device=device)
    c = sgemm(a, b)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    return c


if __name__ == "__main__":
    test_sgemm_square()
    test_sgemm_ragged()
    print("ok")
