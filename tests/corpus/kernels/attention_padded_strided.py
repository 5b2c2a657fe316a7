"""Naive cross attention with explicit strides and per-batch key lengths (padding), in three kernels (fp32, 4-D tensors)."""

import torch
import triton
import triton.language as tl

ENTRY = "padded_attention"


@triton.jit
def attn_scores(Q, K, S, kv_lens, sm_scale, seq_q, seq_k,
                stride_qb, stride_qh, stride_qm, stride_qd,
                stride_kb, stride_kh, stride_kn, stride_kd,
                stride_sb, stride_sh, stride_sm, stride_sn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    start_m = tl.program_id(0)
    off_b = tl.program_id(1)
    off_h = tl.program_id(2)
    kv_len = tl.load(kv_lens + off_b)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    q_ptrs = Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=offs_m[:, None] < seq_q, other=0.0)
    for start_n in range(0, seq_k, BLOCK_N):
        k_ptrs = K + off_b * stride_kb + off_h * stride_kh + (start_n + offs_n)[None, :] * stride_kn + offs_d[:, None] * stride_kd
        k = tl.load(k_ptrs, mask=(start_n + offs_n)[None, :] < seq_k, other=0.0)
        qk = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        qk += tl.dot(q, k)
        qk *= sm_scale
        qk = tl.where((start_n + offs_n)[None, :] < kv_len, qk, float("-inf"))
        s_ptrs = S + off_b * stride_sb + off_h * stride_sh + offs_m[:, None] * stride_sm + (start_n + offs_n)[None, :] * stride_sn
        tl.store(s_ptrs, qk, mask=(offs_m[:, None] < seq_q) & ((start_n + offs_n)[None, :] < seq_k))


@triton.jit
def softmax_rows(inp_ptr, out_ptr, in_stride, out_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    row = tl.load(inp_ptr + row_idx * in_stride + col_offsets, mask=col_offsets < n_cols, other=-float("inf"))
    row_minus_max = row - tl.max(row, axis=0)
    numerator = tl.exp(row_minus_max)
    denominator = tl.sum(numerator, axis=0)
    tl.store(out_ptr + row_idx * out_stride + col_offsets, numerator / denominator, mask=col_offsets < n_cols)


@triton.jit
def attn_pv(P, V, Out, seq_q, seq_k,
            stride_pb, stride_ph, stride_pm, stride_pn,
            stride_vb, stride_vh, stride_vn, stride_vd,
            stride_ob, stride_oh, stride_om, stride_od,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    start_m = tl.program_id(0)
    off_b = tl.program_id(1)
    off_h = tl.program_id(2)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start_n in range(0, seq_k, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        p = tl.load(P + off_b * stride_pb + off_h * stride_ph + offs_m[:, None] * stride_pm + offs_n[None, :] * stride_pn,
                    mask=(offs_m[:, None] < seq_q) & (offs_n[None, :] < seq_k), other=0.0)
        v = tl.load(V + off_b * stride_vb + off_h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                    mask=offs_n[:, None] < seq_k, other=0.0)
        acc += tl.dot(p, v)
    tl.store(Out + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
             acc, mask=offs_m[:, None] < seq_q)


def padded_attention(q, k, v, kv_lens):
    batch, heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    sm_scale = 1.0 / head_dim ** 0.5
    s = torch.empty((batch, heads, seq_q, seq_k), device=q.device, dtype=torch.float32)
    p = torch.empty((batch, heads, seq_q, seq_k), device=q.device, dtype=torch.float32)
    o = torch.empty_like(q)
    BLOCK_M, BLOCK_N = 16, 16
    grid = (triton.cdiv(seq_q, BLOCK_M), batch, heads)
    attn_scores[grid](q, k, s, kv_lens, sm_scale, seq_q, seq_k,
                      q.stride(0), q.stride(1), q.stride(2), q.stride(3),
                      k.stride(0), k.stride(1), k.stride(2), k.stride(3),
                      s.stride(0), s.stride(1), s.stride(2), s.stride(3),
                      BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=head_dim)
    softmax_rows[(batch * heads * seq_q,)](s, p, s.stride(2), p.stride(2), seq_k,
                                           BLOCK_SIZE=triton.next_power_of_2(seq_k))
    attn_pv[grid](p, v, o, seq_q, seq_k,
                  p.stride(0), p.stride(1), p.stride(2), p.stride(3),
                  v.stride(0), v.stride(1), v.stride(2), v.stride(3),
                  o.stride(0), o.stride(1), o.stride(2), o.stride(3),
                  BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=head_dim)
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
