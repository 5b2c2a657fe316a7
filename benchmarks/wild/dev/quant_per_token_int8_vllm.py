"""Dynamic per-token int8 quantisation (vLLM's scaled_int8_quant): absmax per row, scale out, rounded int8 out."""

import torch
import triton
import triton.language as tl


@triton.jit
def _per_token_quant_int8(x_ptr, xq_ptr, scale_ptr, stride_x, stride_xq, N, BLOCK: tl.constexpr):
    row_id = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row_id * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    absmax = tl.maximum(tl.max(tl.abs(x)), 1e-10)
    scale_x = absmax / 127
    x_q = x * (127 / absmax)
    # round half away from zero (libdevice's round), spelled portably
    x_q = tl.where(x_q >= 0, tl.floor(x_q + 0.5), tl.ceil(x_q - 0.5)).to(tl.int8)
    tl.store(xq_ptr + row_id * stride_xq + cols, x_q, mask=mask)
    tl.store(scale_ptr + row_id, scale_x)


def per_token_quant_int8(x):
    M = x.numel() // x.shape[-1]
    N = x.shape[-1]
    x_q = torch.empty_like(x, device=x.device, dtype=torch.int8)
    scales = torch.empty(x.shape[:-1] + (1,), device=x.device, dtype=torch.float32)
    BLOCK = triton.next_power_of_2(N)
    num_warps = min(max(BLOCK // 256, 1), 8)
    x = x.contiguous()
    _per_token_quant_int8[(M,)](x, x_q, scales, stride_x=x.stride(-2), stride_xq=x_q.stride(-2), N=N, BLOCK=BLOCK,
                                num_warps=num_warps, num_stages=1)
    return x_q, scales


def get_inputs(device: str = "cuda", tokens: int = 8192, hidden: int = 7168):
    return [torch.randn(tokens, hidden, device=device, dtype=torch.float16)]


def reference(x):
    xf = x.float()
    absmax = xf.abs().amax(-1, keepdim=True).clamp_min(1e-10)
    # a true division, as the kernel does (127 / tensor is reciprocal-then-multiply in PyTorch: an ulp off)
    q = xf * (absmax.new_tensor(127.0) / absmax)
    q = torch.where(q >= 0, torch.floor(q + 0.5), torch.ceil(q - 0.5)).to(torch.int8)
    return q, absmax / 127


def eager(x):
    """Per-token int8 quantisation in the input's fp16."""
    scale = x.abs().amax(-1, keepdim=True).clamp_min(1e-4) / 127
    return torch.round(x / scale).to(torch.int8), scale
