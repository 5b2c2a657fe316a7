"""Naive cross attention with explicit strides and per-batch key lengths (padding), in three kernels (fp32, 4-D tensors)."""

import torch
import triton
import triton.language as tl

ENTRY = "padded_attention"


@triton.jit
def attn_pv(V, Out, seq_q, seq_k,
            stride_vb, stride_vh, stride_vn, stride_vd,
            stride_ob, stride_oh, stride_om, stride_od,
            Q, K, kv_lens, sm_scale, stride_qb, stride_qh, stride_qm, stride_qd, stride_kb, stride_kh, stride_kn, stride_kd,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_b = tl.program_id(1)
    off_h = tl.program_id(2)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    kv_len = tl.load(kv_lens + off_b)
    offs_n_qk = tl.arange(0, BLOCK_N)
    q_ptrs = Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=offs_m[:, None] < seq_q, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for start_n in range(0, seq_k, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k_ptrs = K + off_b * stride_kb + off_h * stride_kh + (start_n + offs_n_qk)[None, :] * stride_kn + offs_d[:, None] * stride_kd
        if EVEN_N:
            k = tl.load(k_ptrs)
        else:
            k = tl.load(k_ptrs, mask=(start_n + offs_n_qk)[None, :] < seq_k, other=0.0)
        qk = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        qk += tl.dot(q, k)
        qk *= sm_scale
        qk = tl.where((start_n + offs_n_qk)[None, :] < kv_len, qk, float("-inf"))
        if EVEN_N:
            qk = qk.to(tl.float32) * 1.4426950408889634
        else:
            qk = tl.where(offs_n[None, :] < seq_k, qk.to(tl.float32) * 1.4426950408889634, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        m_i = m_new
        if EVEN_N:
            v = tl.load(V + off_b * stride_vb + off_h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd)
        else:
            v = tl.load(V + off_b * stride_vb + off_h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                        mask=offs_n[:, None] < seq_k, other=0.0)
        acc += tl.dot(p, v)
    acc = acc / l_i[:, None]
    tl.store(Out + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
             acc, mask=offs_m[:, None] < seq_q)


def padded_attention(q, k, v, kv_lens):
    batch, heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    sm_scale = 1.0 / head_dim ** 0.5
    o = torch.empty_like(q)
    BLOCK_M, BLOCK_N = 16, 16
    grid = (triton.cdiv(seq_q, BLOCK_M), batch, heads)
    attn_pv[grid](v, o, seq_q, seq_k,
                  v.stride(0), v.stride(1), v.stride(2), v.stride(3),
                  o.stride(0), o.stride(1), o.stride(2), o.stride(3),
                  q, k, kv_lens, sm_scale, q.stride(0), q.stride(1), q.stride(2), q.stride(3), k.stride(0), k.stride(1), k.stride(2), k.stride(3),
                  BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=head_dim, EVEN_N=seq_k % BLOCK_N == 0)
    return o


# Tiny in the interpreter, GPU-sized otherwise.
SIZES = {"cpu": {"batch": 2, "heads": 2, "seq_q": 24, "seq_k": 40, "head_dim": 16},
         "cuda": {"batch": 4, "heads": 16, "seq_q": 1024, "seq_k": 2048, "head_dim": 64}}


def get_inputs(device="cpu", batch=None, heads=None, seq_q=None, seq_k=None, head_dim=None):
    d = SIZES["cpu" if str(device).startswith("cpu") else "cuda"]
    batch, heads, head_dim = batch or d["batch"], heads or d["heads"], head_dim or d["head_dim"]
    seq_q, seq_k = seq_q or d["seq_q"], seq_k or d["seq_k"]
    q = torch.randn(batch, heads, seq_q, head_dim, device=device)
    k = torch.randn(batch, heads, seq_k, head_dim, device=device)
    v = torch.randn(batch, heads, seq_k, head_dim, device=device)
    kv_lens = torch.randint(1, seq_k + 1, (batch,), device=device, dtype=torch.int32)
    return [q, k, v, kv_lens]


def reference(q, k, v, kv_lens):
    s = (q.double() @ k.double().transpose(-1, -2)) / q.shape[-1] ** 0.5
    for b, n in enumerate(kv_lens.tolist()):
        s[b, :, :, n:] = float("-inf")
    return (torch.softmax(s, dim=-1) @ v.double()).float()
