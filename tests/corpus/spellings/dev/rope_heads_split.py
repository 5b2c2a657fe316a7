"""Rotary embedding over [S, H, D] (one sequence), one (token, head) per program: pid // H and pid % H."""

import torch
import triton
import triton.language as tl

ENTRY = "rope"


@triton.jit
def rope_kernel(q_ptr, cos_ptr, sin_ptr, out_ptr, n_heads, stride_s, stride_h, HALF: tl.constexpr):
    pid = tl.program_id(0)
    token = pid // n_heads
    head = pid % n_heads
    d = tl.arange(0, HALF)
    row = q_ptr + token * stride_s + head * stride_h
    a = tl.load(row + d)
    b = tl.load(row + HALF + d)
    cos = tl.load(cos_ptr + token * HALF + d)
    sin = tl.load(sin_ptr + token * HALF + d)
    dst = out_ptr + token * stride_s + head * stride_h
    tl.store(dst + d, a * cos - b * sin)
    tl.store(dst + HALF + d, b * cos + a * sin)


def rope(q, cos, sin):
    S, H, D = q.shape
    out = torch.empty_like(q)
    rope_kernel[(S * H,)](q, cos, sin, out, H, q.stride(0), q.stride(1), HALF=D // 2, num_warps=1)
    return out


def get_inputs(device="cpu"):
    S, H, D = 7, 4, 32
    angle = torch.randn(S, D // 2, device=device)
    return [torch.randn(S, H, D, device=device), torch.cos(angle), torch.sin(angle)]


def reference(q, cos, sin):
    half = q.shape[-1] // 2
    a, b = q[..., :half], q[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)
