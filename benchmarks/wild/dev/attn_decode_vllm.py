"""Single-token decode attention over a contiguous KV cache, vLLM-style: one program per (sequence, head), keys in blocks."""

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_attention_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, seq_lens_ptr, out_ptr,
    scale,
    stride_qb, stride_qh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_ob, stride_oh,
    HEAD_SIZE: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    seq_idx = tl.program_id(0)
    head_idx = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq_idx)
    offs_d = tl.arange(0, HEAD_SIZE)
    q = tl.load(q_ptr + seq_idx * stride_qb + head_idx * stride_qh + offs_d).to(tl.float32)

    m_prev = -float("inf")
    l_prev = 0.0
    acc = tl.zeros([HEAD_SIZE], dtype=tl.float32)
    for start in range(0, seq_len, BLOCK_T):
        offs_t = start + tl.arange(0, BLOCK_T)
        t_mask = offs_t < seq_len
        k = tl.load(k_cache_ptr + seq_idx * stride_kb + offs_t[:, None] * stride_kt + head_idx * stride_kh
                    + offs_d[None, :], mask=t_mask[:, None], other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * scale
        s = tl.where(t_mask, s, -float("inf"))
        m_new = tl.maximum(m_prev, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m_prev - m_new)
        v = tl.load(v_cache_ptr + seq_idx * stride_vb + offs_t[:, None] * stride_vt + head_idx * stride_vh
                    + offs_d[None, :], mask=t_mask[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_prev = l_prev * alpha + tl.sum(p, axis=0)
        m_prev = m_new
    out = acc / l_prev
    tl.store(out_ptr + seq_idx * stride_ob + head_idx * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty))


def decode_attention(q, k_cache, v_cache, seq_lens):
    num_seqs, num_heads, head_size = q.shape
    out = torch.empty_like(q)
    grid = (num_seqs, num_heads)
    _decode_attention_kernel[grid](
        q, k_cache, v_cache, seq_lens, out, head_size ** -0.5,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        out.stride(0), out.stride(1),
        HEAD_SIZE=head_size, BLOCK_T=16,
    )
    return out


def get_inputs(device: str = "cuda", num_seqs: int = 8, num_heads: int = 8, max_len: int = 4096, head_size: int = 128):
    q = torch.randn(num_seqs, num_heads, head_size, device=device, dtype=torch.float16)
    k_cache = torch.randn(num_seqs, max_len, num_heads, head_size, device=device, dtype=torch.float16)
    v_cache = torch.randn(num_seqs, max_len, num_heads, head_size, device=device, dtype=torch.float16)
    seq_lens = torch.randint(1, max_len + 1, (num_seqs,), device=device, dtype=torch.int32)
    return [q, k_cache, v_cache, seq_lens]


def reference(q, k_cache, v_cache, seq_lens):
    out = torch.empty_like(q)
    for i, n in enumerate(seq_lens.tolist()):
        k = k_cache[i, :n].float().transpose(0, 1)  # [heads, n, d]
        v = v_cache[i, :n].float().transpose(0, 1)
        s = (k @ q[i].float()[:, :, None]).squeeze(-1) * q.shape[-1] ** -0.5
        out[i] = (torch.softmax(s, -1)[:, None, :] @ v).squeeze(1).to(q.dtype)
    return out


def eager(q, k_cache, v_cache, seq_lens):
    """The baseline a user calls: SDPA of each sequence's query over its cached keys, in fp16."""
    out = torch.empty_like(q)
    for i, n in enumerate(seq_lens.tolist()):
        k, v = k_cache[i, :n].transpose(0, 1), v_cache[i, :n].transpose(0, 1)  # [heads, n, d]
        out[i] = torch.nn.functional.scaled_dot_product_attention(q[i][:, None, :], k, v).squeeze(1)
    return out
