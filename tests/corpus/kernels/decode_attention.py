"""Decode attention: one query token per (sequence, head) over its cache, online softmax in base 2, also the log-sum-exp."""

import torch
import triton
import triton.language as tl

ENTRY = "decode_attention"


@triton.jit
def decode_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, lengths_ptr, max_len, heads, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    length = tl.load(lengths_ptr + seq)
    offs_d = tl.arange(0, HEAD_DIM)
    row = seq * heads + head
    q = tl.load(q_ptr + row * HEAD_DIM + offs_d).to(tl.float32) * qk_scale
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for start in range(0, length, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        kv = (row * max_len + offs_n[:, None]) * HEAD_DIM + offs_d[None, :]
        k = tl.load(k_ptr + kv, mask=offs_n[:, None] < length, other=0.0).to(tl.float32)
        s = tl.where(offs_n < length, tl.sum(k * q[None, :], axis=1), -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new)
        v = tl.load(v_ptr + kv, mask=offs_n[:, None] < length, other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    tl.store(o_ptr + row * HEAD_DIM + offs_d, (acc / l_i).to(o_ptr.dtype.element_ty))
    tl.store(lse_ptr + row, m_i + tl.log2(l_i))


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The output and the log-sum-exp side by side: [seqs, heads, head_dim + 1] in float32."""
    seqs, heads, head_dim = q.shape
    o = torch.empty_like(q)
    lse = torch.empty((seqs, heads), device=q.device, dtype=torch.float32)
    grid = (seqs, heads)
    decode_kernel[grid](q, k, v, o, lse, lengths, k.shape[2], heads, head_dim ** -0.5 * 1.4426950408889634,
                        HEAD_DIM=head_dim, BLOCK_N=16)
    return torch.cat([o.float(), lse[..., None]], dim=-1)


def get_inputs(device: str = "cpu", seqs: int = 2, heads: int = 2, max_len: int = 70, head_dim: int = 16):
    q = torch.randn(seqs, heads, head_dim, device=device, dtype=torch.float16)
    k = torch.randn(seqs, heads, max_len, head_dim, device=device, dtype=torch.float16)
    v = torch.randn(seqs, heads, max_len, head_dim, device=device, dtype=torch.float16)
    lengths = torch.tensor([max_len, 9][:seqs], device=device, dtype=torch.int32)
    return [q, k, v, lengths]


def reference(q, k, v, lengths):
    o, lse = torch.empty_like(q), torch.empty(q.shape[:2], device=q.device, dtype=torch.float32)
    for i, n in enumerate(lengths.tolist()):
        s = (k[i, :, :n].float() @ q[i].float()[:, :, None]).squeeze(-1) * q.shape[-1] ** -0.5
        o[i] = (torch.softmax(s, -1)[:, None, :] @ v[i, :, :n].float()).squeeze(1).to(q.dtype)
        lse[i] = torch.logsumexp(s, -1) * 1.4426950408889634
    return torch.cat([o.float(), lse[..., None]], dim=-1)
