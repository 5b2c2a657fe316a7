"""Naive causal attention as three kernels: scores = Q @ K^T * scale (masked) into a buffer, a row softmax, then P @ V."""

import torch
import triton
import triton.language as tl

ENTRY = "causal_attention"


@triton.jit
def pv_kernel(v_ptr, o_ptr, seq_len,
              q_ptr, k_ptr, scale,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    q = tl.load(q_ptr + bh * seq_len * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
                mask=offs_m[:, None] < seq_len, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for start_n in range(0, tl.minimum(seq_len, (pid_m + 1) * BLOCK_M), BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        if EVEN_N:
            k = tl.load(k_ptr + bh * seq_len * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :])
        else:
            k = tl.load(k_ptr + bh * seq_len * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :],
                        mask=offs_n[:, None] < seq_len, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(offs_m[:, None] >= offs_n[None, :], s, float("-inf"))  # causal
        if EVEN_N:
            s = s.to(tl.float32) * 1.4426950408889634
        else:
            s = tl.where(offs_n[None, :] < seq_len, s.to(tl.float32) * 1.4426950408889634, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        m_i = m_new
        if EVEN_N:
            v = tl.load(v_ptr + bh * seq_len * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :])
        else:
            v = tl.load(v_ptr + bh * seq_len * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :],
                        mask=offs_n[:, None] < seq_len, other=0.0)
        acc += tl.dot(p.to(v.dtype), v)
    acc = acc / l_i[:, None]
    tl.store(o_ptr + bh * seq_len * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
             acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len)


def causal_attention(q, k, v):
    batch, heads, seq_len, head_dim = q.shape
    out = torch.empty_like(q)
    BLOCK = 128
    pv_kernel[(triton.cdiv(seq_len, BLOCK), batch * heads)](v, out, seq_len,
                                                          q, k, head_dim ** -0.5,
                                                          HEAD_DIM=head_dim, BLOCK_M=BLOCK, BLOCK_N=BLOCK, EVEN_N=seq_len % BLOCK == 0, num_warps=8, num_stages=2)
    return out


# Tiny in the interpreter, a real prefill on a GPU (the naive chain then writes 2 GiB of scores and probabilities).
SIZES = {"cpu": {"batch": 2, "heads": 2, "seq_len": 40, "head_dim": 16},
         "cuda": {"batch": 4, "heads": 16, "seq_len": 2048, "head_dim": 64}}


def get_inputs(device="cpu", batch=None, heads=None, seq_len=None, head_dim=None):
    d = SIZES["cpu" if str(device).startswith("cpu") else "cuda"]
    shape = (batch or d["batch"], heads or d["heads"], seq_len or d["seq_len"], head_dim or d["head_dim"])
    return [torch.randn(shape, device=device, dtype=torch.float16) for _ in range(3)]


def reference(q, k, v):
    n = q.shape[-2]
    s = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)
