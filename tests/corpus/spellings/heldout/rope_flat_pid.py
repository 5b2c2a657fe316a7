"""Rotary embedding, one (batch, token, head) per program, the flat program id split as pid % H, (pid // H) % S."""

import torch
import triton
import triton.language as tl

ENTRY = "rope"


@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, S, H, D, HALF: tl.constexpr):
    pid = tl.program_id(0)
    head = pid % H
    pos = (pid // H) % S
    batch = pid // (H * S)
    base = ((batch * S + pos) * H + head) * D
    offs = tl.arange(0, HALF)
    x1 = tl.load(x_ptr + base + offs)
    x2 = tl.load(x_ptr + base + HALF + offs)
    c = tl.load(cos_ptr + pos * HALF + offs)
    s = tl.load(sin_ptr + pos * HALF + offs)
    tl.store(out_ptr + base + offs, x1 * c - x2 * s)
    tl.store(out_ptr + base + HALF + offs, x2 * c + x1 * s)


def rope(x, cos, sin):
    B, S, H, D = x.shape
    out = torch.empty_like(x)
    rope_kernel[(B * S * H,)](x, cos, sin, out, S, H, D, HALF=D // 2, num_warps=1)
    return out


def get_inputs(device="cpu"):
    B, S, H, D = 2, 6, 3, 16
    x = torch.randn(B, S, H, D, device=device)
    angle = torch.randn(S, D // 2, device=device)
    return [x, torch.cos(angle), torch.sin(angle)]


def reference(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
