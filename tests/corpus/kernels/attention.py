"""Attention-like: one block of queries against all keys with an online softmax (flash style)."""

import torch
import triton
import triton.language as tl

ENTRY = "attention"


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq_len, scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    base = head * seq_len * HEAD_DIM
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < seq_len, other=0.0)
    m_i = tl.full((BLOCK_M,), -float("inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    for start_n in range(0, seq_len, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + base + offs_n[None, :] * HEAD_DIM + offs_d[:, None], mask=offs_n[None, :] < seq_len, other=0.0)
        s = tl.dot(q, k) * scale
        s = tl.where(offs_n[None, :] < seq_len, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + base + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_n[:, None] < seq_len, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    heads, seq_len, head_dim = q.shape
    o = torch.empty_like(q)
    grid = (triton.cdiv(seq_len, 16), heads)
    attention_kernel[grid](q, k, v, o, seq_len, head_dim ** -0.5, BLOCK_M=16, BLOCK_N=16, HEAD_DIM=head_dim)
    return o


def get_inputs(device: str = "cpu", heads: int = 2, seq_len: int = 40, head_dim: int = 16):
    return [torch.randn(heads, seq_len, head_dim, device=device, dtype=torch.float16) for _ in range(3)]


def reference(q, k, v):
    s = (q.float() @ k.float().transpose(1, 2)) * q.shape[-1] ** -0.5
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)
