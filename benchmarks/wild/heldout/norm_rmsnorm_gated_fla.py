"""Gated RMSNorm, y = rmsnorm(x) * w * silu(g), in bf16 after flash-linear-attention's fused_norm_gate (one row per program)."""

import torch
import triton
import triton.language as tl


@triton.heuristics({"HAS_WEIGHT": lambda args: args["w"] is not None})
@triton.jit
def rms_norm_gated_fwd_kernel(x, g, y, w, rstd, eps, D, BD: tl.constexpr, HAS_WEIGHT: tl.constexpr):
    i_t = tl.program_id(0)
    x += i_t * D
    g += i_t * D
    y += i_t * D
    o_d = tl.arange(0, BD)
    m_d = o_d < D
    b_x = tl.load(x + o_d, mask=m_d, other=0.0).to(tl.float32)
    b_var = tl.sum(b_x * b_x, axis=0) / D
    b_rstd = 1 / tl.sqrt(b_var + eps)
    tl.store(rstd + i_t, b_rstd)
    b_y = b_x * b_rstd
    if HAS_WEIGHT:
        b_w = tl.load(w + o_d, mask=m_d).to(tl.float32)
        b_y = b_y * b_w
    b_g = tl.load(g + o_d, mask=m_d, other=0.0).to(tl.float32)
    b_y = b_y * b_g * tl.sigmoid(b_g)
    tl.store(y + o_d, b_y.to(y.dtype.element_ty), mask=m_d)


def rms_norm_gated(x, g, weight, eps=1e-5):
    shape = x.shape
    x = x.reshape(-1, shape[-1])
    g = g.reshape(-1, shape[-1])
    T, D = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty(T, device=x.device, dtype=torch.float32)
    rms_norm_gated_fwd_kernel[(T,)](x, g, y, weight, rstd, eps, D, BD=triton.next_power_of_2(D), num_warps=4)
    return y.view(shape)


def get_inputs(device: str = "cuda", tokens: int = 16384, hidden: int = 2048):
    x = torch.randn(tokens, hidden, device=device, dtype=torch.bfloat16)
    g = torch.randn(tokens, hidden, device=device, dtype=torch.bfloat16)
    w = torch.rand(hidden, device=device, dtype=torch.bfloat16) + 0.5
    return [x, g, w, 1e-5]


def reference(x, g, w, eps):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()
    return (y * torch.nn.functional.silu(g.float())).to(x.dtype)


def eager(x, g, w, eps):
    """RMSNorm times SiLU(g) in the inputs' bf16."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps) * torch.nn.functional.silu(g)
