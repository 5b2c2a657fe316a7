"""C = alpha * (A @ B) + R with the scale and residual in the matmul's epilogue; test_* functions check it."""

import torch
import triton
import triton.language as tl


@triton.jit
def matmul_scale_residual_kernel(a_ptr, b_ptr, r_ptr, c_ptr, M, N, K, alpha,
                                 stride_am, stride_bk, stride_rm, stride_cm,
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    r = tl.load(r_ptr + rm[:, None] * stride_rm + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    c = alpha * acc + r
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], c.to(c_ptr.dtype.element_ty), mask=mask)


def matmul_scale_residual(a, b, r, alpha):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    matmul_scale_residual_kernel[grid](a, b, r, c, M, N, K, alpha, a.stride(0), b.stride(0), r.stride(0), c.stride(0),
                                       BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c


def _check(M, N, K, device):
    a = torch.randn(M, K, device=device, dtype=torch.float16)
    b = torch.randn(K, N, device=device, dtype=torch.float16)
    r = torch.randn(M, N, device=device, dtype=torch.float16)
    c = matmul_scale_residual(a, b, r, 0.5)
    expected = (0.5 * (a.float() @ b.float()) + r.float()).half()
    torch.testing.assert_close(c, expected, atol=2e-2, rtol=2e-2)
    return c


def test_scale_residual_aligned(device="cuda"):
    return _check(64, 64, 64, device)


def test_scale_residual_ragged(device="cuda"):
    return _check(70, 45, 100, device)


test_scale_residual_aligned("cuda" if torch.cuda.is_available() else "cpu")
