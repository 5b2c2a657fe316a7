"""Causal depthwise conv1d over [batch, dim, seqlen] (Mamba's short convolution): grid (batch*dim, seq blocks), taps unrolled."""

import torch
import triton
import triton.language as tl


@triton.jit
def causal_conv1d_kernel(x_ptr, w_ptr, b_ptr, out_ptr, dim, seqlen,
                         stride_xb, stride_xd, stride_ob, stride_od,
                         WIDTH: tl.constexpr, BLOCK_L: tl.constexpr):
    pid_bd = tl.program_id(0)
    pid_l = tl.program_id(1)
    b = pid_bd // dim
    d = pid_bd % dim
    offs = pid_l * BLOCK_L + tl.arange(0, BLOCK_L)
    acc = tl.zeros([BLOCK_L], dtype=tl.float32) + tl.load(b_ptr + d)
    for j in tl.static_range(WIDTH):
        src = offs - (WIDTH - 1) + j
        x = tl.load(x_ptr + b * stride_xb + d * stride_xd + src, mask=(src >= 0) & (src < seqlen), other=0.0)
        acc += x * tl.load(w_ptr + d * WIDTH + j)
    acc = acc * tl.sigmoid(acc)  # SiLU activation, as in causal_conv1d(activation="silu")
    tl.store(out_ptr + b * stride_ob + d * stride_od + offs, acc, mask=offs < seqlen)


def causal_conv1d(x, weight, bias):
    batch, dim, seqlen = x.shape
    width = weight.shape[1]
    out = torch.empty_like(x)
    grid = (batch * dim, triton.cdiv(seqlen, 64))
    causal_conv1d_kernel[grid](x, weight, bias, out, dim, seqlen, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
                               WIDTH=width, BLOCK_L=64)
    return out


def get_inputs(device: str = "cuda", batch: int = 2, dim: int = 2048, seqlen: int = 4096, width: int = 4):
    x = torch.randn(batch, dim, seqlen, device=device)
    weight = torch.randn(dim, width, device=device)
    bias = torch.randn(dim, device=device)
    return [x, weight, bias]


def reference(x, weight, bias):
    dim, width = weight.shape
    out = torch.nn.functional.conv1d(x, weight[:, None, :], bias, padding=width - 1, groups=dim)[..., :x.shape[-1]]
    return torch.nn.functional.silu(out)
