"""W4A16 matmul: two int4 weights packed per uint8 along K, group-wise scales and zeros; test_* functions at module level."""

import torch
import triton
import triton.language as tl


@triton.jit
def w4a16_matmul_kernel(a_ptr, qw_ptr, scales_ptr, zeros_ptr, c_ptr, M, N, K, group_size,
                        stride_am, stride_qk, stride_sg, stride_cm,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        packed = tl.load(qw_ptr + (kk // 2)[:, None] * stride_qk + rn[None, :],
                         mask=(kk[:, None] < K) & (rn[None, :] < N), other=0)
        shift = (kk % 2) * 4
        q = (packed.to(tl.int32) >> shift[:, None]) & 0xF
        g = kk // group_size
        scale = tl.load(scales_ptr + g[:, None] * stride_sg + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        zero = tl.load(zeros_ptr + g[:, None] * stride_sg + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        w = ((q.to(tl.float32) - zero) * scale).to(tl.float16)
        acc += tl.dot(a, w)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def w4a16_matmul(a, qweight, scales, zeros, group_size):
    M, K = a.shape
    N = qweight.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 16), triton.cdiv(N, 32))
    w4a16_matmul_kernel[grid](a, qweight, scales, zeros, c, M, N, K, group_size,
                              a.stride(0), qweight.stride(0), scales.stride(0), c.stride(0),
                              BLOCK_M=16, BLOCK_N=32, BLOCK_K=32)
    return c


def pack_int4(q):
    """[K, N] values in 0..15 -> [K // 2, N] uint8, even k in the low nibble."""
    return (q[0::2] | (q[1::2] << 4)).to(torch.uint8)


def _case(M, N, K, group_size, device):
    torch.manual_seed(K)
    a = torch.randn(M, K, device=device, dtype=torch.float16)
    q = torch.randint(0, 16, (K, N), device=device, dtype=torch.int32)
    scales = torch.rand(K // group_size, N, device=device) * 0.05
    zeros = torch.full((K // group_size, N), 8.0, device=device)
    c = w4a16_matmul(a, pack_int4(q), scales, zeros, group_size)
    w = ((q.float() - zeros.repeat_interleave(group_size, 0)) * scales.repeat_interleave(group_size, 0)).half()
    torch.testing.assert_close(c, (a.float() @ w.float()).half(), atol=2e-2, rtol=2e-2)
    return c


def test_w4a16_group64(device="cuda"):
    return _case(40, 96, 128, 64, device)


def test_w4a16_group32_ragged_m(device="cuda"):
    return _case(7, 64, 96, 32, device)


test_w4a16_group64("cuda" if torch.cuda.is_available() else "cpu")
