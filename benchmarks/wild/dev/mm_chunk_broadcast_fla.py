"""Per-head projection in flash-linear-attention's naming (b_/p_/i_), its tile product written as a broadcast
multiply and tl.sum over 16-wide tiles (no tl.dot), fp16 in, fp32 accumulation."""

import torch
import triton
import triton.language as tl


@triton.jit
def chunk_project_fwd_kernel(x, w, o, T, K, V, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_t, i_v, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    o_t = i_t * BT + tl.arange(0, BT)
    o_v = i_v * BV + tl.arange(0, BV)
    b_o = tl.zeros([BT, BV], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        p_x = x + i_bh * T * K + o_t[:, None] * K + o_k[None, :]
        p_w = w + i_bh * K * V + o_k[:, None] * V + o_v[None, :]
        b_x = tl.load(p_x, mask=(o_t[:, None] < T) & (o_k[None, :] < K), other=0.0).to(tl.float32)
        b_w = tl.load(p_w, mask=(o_k[:, None] < K) & (o_v[None, :] < V), other=0.0).to(tl.float32)
        b_o += tl.sum(b_x[:, :, None] * b_w[None, :, :], axis=1)
    p_o = o + i_bh * T * V + o_t[:, None] * V + o_v[None, :]
    tl.store(p_o, b_o.to(o.dtype.element_ty), mask=(o_t[:, None] < T) & (o_v[None, :] < V))


def chunk_project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    B, H, T, K = x.shape
    V = w.shape[-1]
    o = torch.empty(B, H, T, V, device=x.device, dtype=x.dtype)
    BT, BK, BV = 16, 16, 16
    grid = (triton.cdiv(T, BT), triton.cdiv(V, BV), B * H)
    chunk_project_fwd_kernel[grid](x, w, o, T, K, V, BT=BT, BK=BK, BV=BV)
    return o


def get_inputs(device="cuda", seq_len: int = 2048, dim: int = 128):
    batch_heads = (2, 8)
    x = torch.randn(*batch_heads, seq_len, dim, device=device, dtype=torch.float16)
    w = torch.randn(*batch_heads, dim, dim, device=device, dtype=torch.float16) / dim ** 0.5
    return [x, w]


def reference(x, w):
    return (x.float() @ w.float()).to(x.dtype)


def eager(x, w):
    """The per-head fp16 matmul a user calls."""
    return torch.matmul(x, w)
