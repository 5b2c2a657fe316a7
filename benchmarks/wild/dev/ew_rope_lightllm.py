"""Rotary position embedding in place of a copy, lightllm-style: grid (tokens, heads), half-dim cos/sin tables, fp16."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rotary_kernel(
    Q, Cos, Sin, Out,
    stride_qbs, stride_qh, stride_qd,
    stride_cosbs, stride_cosd,
    stride_sinbs, stride_sind,
    stride_obs, stride_oh, stride_od,
    max_total_len,
    H,
    BLOCK_DMODEL: tl.constexpr,
):
    cur_seq = tl.program_id(0)
    cur_head = tl.program_id(1)
    dim_range0 = tl.arange(0, BLOCK_DMODEL // 2)
    dim_range1 = tl.arange(BLOCK_DMODEL // 2, BLOCK_DMODEL)

    off_q0 = cur_seq * stride_qbs + cur_head * stride_qh + dim_range0 * stride_qd
    off_q1 = cur_seq * stride_qbs + cur_head * stride_qh + dim_range1 * stride_qd
    off_dimcos_sin = cur_seq * stride_cosbs + dim_range0 * stride_cosd

    q0 = tl.load(Q + off_q0).to(tl.float32)
    q1 = tl.load(Q + off_q1).to(tl.float32)
    cos = tl.load(Cos + off_dimcos_sin)
    sin = tl.load(Sin + off_dimcos_sin)

    out0 = q0 * cos - q1 * sin
    out1 = q0 * sin + q1 * cos

    off_o0 = cur_seq * stride_obs + cur_head * stride_oh + dim_range0 * stride_od
    off_o1 = cur_seq * stride_obs + cur_head * stride_oh + dim_range1 * stride_od
    tl.store(Out + off_o0, out0.to(Out.dtype.element_ty))
    tl.store(Out + off_o1, out1.to(Out.dtype.element_ty))


@torch.no_grad()
def rotary_emb_fwd(q, cos, sin):
    total_len, head_num, head_dim = q.shape
    assert q.shape[0] == cos.shape[0] and q.shape[0] == sin.shape[0]
    out = torch.empty_like(q)
    grid = (total_len, head_num)
    num_warps = 4 if head_dim <= 128 else 8
    _rotary_kernel[grid](
        q, cos, sin, out,
        q.stride(0), q.stride(1), q.stride(2),
        cos.stride(0), cos.stride(1),
        sin.stride(0), sin.stride(1),
        out.stride(0), out.stride(1), out.stride(2),
        total_len, head_num,
        BLOCK_DMODEL=head_dim,
        num_warps=num_warps,
        num_stages=1,
    )
    return out


def get_inputs(device: str = "cuda", tokens: int = 8192, heads: int = 8, head_dim: int = 128):
    q = torch.randn(tokens, heads, head_dim, device=device, dtype=torch.float16)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    freqs = torch.arange(tokens, device=device, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return [q, freqs.cos(), freqs.sin()]


def reference(q, cos, sin):
    half = q.shape[-1] // 2
    q0, q1 = q[..., :half].float(), q[..., half:].float()
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([q0 * c - q1 * s, q0 * s + q1 * c], dim=-1).to(q.dtype)


def eager(q, cos, sin):
    """The rotation in q's fp16 (cos and sin converted once)."""
    half = q.shape[-1] // 2
    q0, q1 = q[..., :half], q[..., half:]
    c, s = cos[:, None, :].to(q.dtype), sin[:, None, :].to(q.dtype)
    return torch.cat([q0 * c - q1 * s, q0 * s + q1 * c], dim=-1)
