"""Layer norm over the channels of [B, C, S] with a per-channel weight: one program per (batch, position
block), three loops over the channels (mean, variance, output), one [BLOCK_S] vector loaded per channel."""

import torch
import triton
import triton.language as tl

ENTRY = "channel_norm"


@triton.jit
def channel_norm_kernel(x_ptr, w_ptr, y_ptr, C, S, eps, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    offs = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    in_bounds = offs < S
    base = tl.program_id(0) * C * S
    total = tl.zeros([BLOCK_S], dtype=tl.float32)
    offs_ch = tl.arange(0, BLOCK_C)
    mask_ch = offs_ch < C
    x = tl.load(x_ptr + base + offs_ch[:, None] * S + offs[None, :], mask=mask_ch[:, None] & in_bounds[None, :], other=0.0)
    total += tl.sum(x, axis=0)
    mean = total / C
    sq = tl.zeros([BLOCK_S], dtype=tl.float32)
    d = x - mean[None, :]
    sq += tl.sum(tl.where(mask_ch[:, None], d * d, 0.0), axis=0)
    inv = 1.0 / tl.sqrt(sq / C + eps)
    w = tl.load(w_ptr + offs_ch[:, None], mask=mask_ch[:, None])
    tl.store(y_ptr + base + offs_ch[:, None] * S + offs[None, :], (x - mean[None, :]) * inv[None, :] * w, mask=mask_ch[:, None] & in_bounds[None, :])


def channel_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    B, C, S = x.shape[0], x.shape[1], x[0, 0].numel()
    BLOCK_C = triton.next_power_of_2(C)
    BLOCK_S = min(64, max(1, 8192 // BLOCK_C))
    channel_norm_kernel[(B, triton.cdiv(S, BLOCK_S))](x, w, y, C, S, 1e-5, BLOCK_S=BLOCK_S, BLOCK_C=BLOCK_C)
    return y


def get_inputs(device: str = "cpu", batch: int = 2, channels: int = 5, h: int = 7, w: int = 11):
    return [torch.randn(batch, channels, h, w, device=device), torch.randn(channels, device=device)]


def reference(x, w):
    mean = x.mean(dim=1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * w[None, :, None, None]
