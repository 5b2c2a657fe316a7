"""KernelBench-style scaled-dot-product attention: ModelNew runs a first flash kernel (one head per program row block)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 2
num_heads = 8
seq_len = 1024
head_dim = 64


@triton.jit
def sdpa_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq_len, scale,
                    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh * seq_len * HEAD_DIM
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < seq_len, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, seq_len, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + base + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_n[:, None] < seq_len, other=0.0)
        v = tl.load(v_ptr + base + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_n[:, None] < seq_len, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(offs_n[None, :] < seq_len, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    tl.store(o_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], (acc / l_i[:, None]).to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < seq_len)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, Q, K, V):
        return torch.nn.functional.scaled_dot_product_attention(Q.float(), K.float(), V.float()).to(Q.dtype)


def eager(Q, K, V):
    """The baseline a user calls: SDPA in the inputs' fp16."""
    return torch.nn.functional.scaled_dot_product_attention(Q, K, V)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, Q, K, V):
        B, H, S, D = Q.shape
        Q, K, V = Q.contiguous(), K.contiguous(), V.contiguous()
        out = torch.empty_like(Q)
        grid = (triton.cdiv(S, 32), B * H)
        sdpa_fwd_kernel[grid](Q, K, V, out, S, D ** -0.5, HEAD_DIM=D, BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=1)
        return out


def get_inputs(batch: int = batch_size, heads: int = num_heads, seq: int = seq_len, dim: int = head_dim):
    Q = torch.randn(batch, heads, seq, dim, dtype=torch.float16)
    K = torch.randn(batch, heads, seq, dim, dtype=torch.float16)
    V = torch.randn(batch, heads, seq, dim, dtype=torch.float16)
    return [Q, K, V]


def get_init_inputs():
    return []
