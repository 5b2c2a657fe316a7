"""Recurrent (non-chunked) linear attention in flash-linear-attention's naming: one program per (key block, value block, b*h)."""

import torch
import triton
import triton.language as tl


@triton.heuristics({"USE_INITIAL_STATE": lambda args: args["h0"] is not None})
@triton.jit(do_not_specialize=["T"])
def fused_recurrent_linear_attn_fwd_kernel(
    q, k, v, o, h0,
    scale,
    T,
    K: tl.constexpr,
    V: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    USE_INITIAL_STATE: tl.constexpr,
):
    i_v, i_k, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    p_q = q + i_bh * T * K + i_k * BK + tl.arange(0, BK)
    p_k = k + i_bh * T * K + i_k * BK + tl.arange(0, BK)
    p_v = v + i_bh * T * V + i_v * BV + tl.arange(0, BV)
    p_o = o + (i_k * tl.num_programs(2) + i_bh) * T * V + i_v * BV + tl.arange(0, BV)
    mask_k = (i_k * BK + tl.arange(0, BK)) < K
    mask_v = (i_v * BV + tl.arange(0, BV)) < V
    mask_h = mask_k[:, None] & mask_v[None, :]
    b_h = tl.zeros([BK, BV], dtype=tl.float32)
    if USE_INITIAL_STATE:
        p_h0 = h0 + i_bh * K * V + (i_k * BK + tl.arange(0, BK)[:, None]) * V + (i_v * BV + tl.arange(0, BV)[None, :])
        b_h += tl.load(p_h0, mask=mask_h, other=0).to(tl.float32)
    for _ in range(0, T):
        b_k = tl.load(p_k, mask=mask_k, other=0).to(tl.float32)
        b_v = tl.load(p_v, mask=mask_v, other=0).to(tl.float32)
        b_q = tl.load(p_q, mask=mask_k, other=0).to(tl.float32) * scale
        b_h += b_k[:, None] * b_v[None, :]
        b_o = tl.sum(b_h * b_q[:, None], 0)
        tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=mask_v)
        p_q += K
        p_k += K
        p_o += V
        p_v += V


def fused_recurrent_linear_attn(q, k, v, scale=None, initial_state=None):
    B, H, T, K = q.shape
    V = v.shape[-1]
    scale = scale or K ** -0.5
    BK, BV = min(K, 32), min(V, 32)
    NK, NV = triton.cdiv(K, BK), triton.cdiv(V, BV)
    o = q.new_empty(NK, B, H, T, V, dtype=torch.float32)
    grid = (NV, NK, B * H)
    fused_recurrent_linear_attn_fwd_kernel[grid](q, k, v, o, initial_state, scale, T=T, K=K, V=V, BK=BK, BV=BV,
                                                 num_warps=1, num_stages=1)
    return o.sum(0).to(q.dtype)


def get_inputs(device: str = "cuda", batch: int = 2, heads: int = 4, seq_len: int = 512, head_dim: int = 64):
    q = torch.randn(batch, heads, seq_len, head_dim, device=device, dtype=torch.float32) * 0.1
    k = torch.randn(batch, heads, seq_len, head_dim, device=device, dtype=torch.float32) * 0.1
    v = torch.randn(batch, heads, seq_len, head_dim, device=device, dtype=torch.float32)
    return [q, k, v]


def reference(q, k, v):
    scale = q.shape[-1] ** -0.5
    scores = (q.double() @ k.double().transpose(-1, -2)) * scale
    causal = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool, device=q.device).tril()
    return (scores.masked_fill(~causal, 0.0) @ v.double()).to(q.dtype)


def eager(q, k, v):
    """The reference's causal linear attention in the inputs' fp32."""
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    causal = torch.ones(q.shape[2], q.shape[2], dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~causal, 0.0) @ v
