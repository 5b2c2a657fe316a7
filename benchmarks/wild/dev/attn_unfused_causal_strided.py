"""Causal attention in three kernels over [batch, heads, seq, dim] tensors read through their four strides
(lightllm/vLLM style: capitalised pointers, off_hz program ids, K loaded transposed as in Triton's early tutorial);
fp16 probabilities feed the P @ V dot."""

import torch
import triton
import triton.language as tl


@triton.jit
def _qk_kernel(
    Q, K, S, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    H, N_CTX,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DMODEL: tl.constexpr,
):
    start_m = tl.program_id(0)
    start_n = tl.program_id(1)
    off_hz = tl.program_id(2)
    off_z = off_hz // H
    off_h = off_hz % H
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_DMODEL)
    q_ptrs = Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk
    k_ptrs = K + off_z * stride_kz + off_h * stride_kh + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kk
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N_CTX, other=0.0)
    k = tl.load(k_ptrs, mask=offs_n[None, :] < N_CTX, other=0.0)
    qk = tl.dot(q, k)
    qk = qk * sm_scale
    qk = tl.where(offs_m[:, None] >= offs_n[None, :], qk, float("-inf"))
    s_ptrs = S + off_hz * N_CTX * N_CTX + offs_m[:, None] * N_CTX + offs_n[None, :]
    tl.store(s_ptrs, qk, mask=(offs_m[:, None] < N_CTX) & (offs_n[None, :] < N_CTX))


@triton.jit
def _softmax_kernel(S, P, n_cols, BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    row = tl.load(S + row_idx * n_cols + col_offsets, mask=mask, other=-float("inf"))
    row_minus_max = row - tl.max(row, axis=0)
    numerator = tl.exp(row_minus_max)
    denominator = tl.sum(numerator, axis=0)
    softmax_output = numerator / denominator
    tl.store(P + row_idx * n_cols + col_offsets, softmax_output.to(P.dtype.element_ty), mask=mask)


@triton.jit
def _pv_kernel(
    P, V, Out,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_oz, stride_oh, stride_om, stride_ok,
    H, N_CTX,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DMODEL: tl.constexpr,
):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_DMODEL)
    acc = tl.zeros([BLOCK_M, BLOCK_DMODEL], dtype=tl.float32)
    for start_n in range(0, N_CTX, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        p = tl.load(P + off_hz * N_CTX * N_CTX + offs_m[:, None] * N_CTX + offs_n[None, :],
                    mask=(offs_m[:, None] < N_CTX) & (offs_n[None, :] < N_CTX), other=0.0)
        v = tl.load(V + off_z * stride_vz + off_h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk,
                    mask=offs_n[:, None] < N_CTX, other=0.0)
        acc += tl.dot(p, v)
    o_ptrs = Out + off_z * stride_oz + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=offs_m[:, None] < N_CTX)


def causal_attention(q, k, v, sm_scale):
    Z, H, N_CTX, D = q.shape
    s = torch.empty((Z * H, N_CTX, N_CTX), device=q.device, dtype=torch.float32)
    p = torch.empty((Z * H, N_CTX, N_CTX), device=q.device, dtype=q.dtype)
    o = torch.empty_like(q)
    BLOCK = 32
    grid = (triton.cdiv(N_CTX, BLOCK), triton.cdiv(N_CTX, BLOCK), Z * H)
    _qk_kernel[grid](
        q, k, s, sm_scale,
        q.stride(0), q.stride(1), q.stride(2), q.stride(3),
        k.stride(0), k.stride(1), k.stride(2), k.stride(3),
        H, N_CTX,
        BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_DMODEL=D,
    )
    _softmax_kernel[(Z * H * N_CTX,)](s, p, N_CTX, BLOCK_SIZE=triton.next_power_of_2(N_CTX))
    _pv_kernel[(triton.cdiv(N_CTX, BLOCK), Z * H)](
        p, v, o,
        v.stride(0), v.stride(1), v.stride(2), v.stride(3),
        o.stride(0), o.stride(1), o.stride(2), o.stride(3),
        H, N_CTX,
        BLOCK_M=BLOCK, BLOCK_N=BLOCK, BLOCK_DMODEL=D,
    )
    return o


def get_inputs(device: str = "cuda", batch: int = 2, heads: int = 8, seq_len: int = 2000, head_dim: int = 64):
    q, k, v = (torch.randn(batch, heads, seq_len, head_dim, device=device, dtype=torch.float16) for _ in range(3))
    return [q, k, v, head_dim ** -0.5]


def reference(q, k, v, sm_scale):
    n = q.shape[2]
    scores = (q.float() @ k.float().transpose(-1, -2)) * sm_scale
    causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v.float()).to(q.dtype)


def eager(q, k, v, sm_scale):
    """The baseline a user calls: causal SDPA in the inputs' fp16."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=sm_scale)
