"""Causal depthwise conv1d over [batch, dim, seqlen] (Mamba's short convolution): grid (batch*dim, seq blocks), taps unrolled."""

import torch
import triton
import triton.language as tl


@triton.jit
def causal_conv1d_kernel(x_ptr, w_ptr, b_ptr, out_ptr, dim, seqlen,
                         stride_xb, stride_xd, stride_ob, stride_od,
                         n_rows,
                         WIDTH: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr):
    pid_bd = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = pid_bd < n_rows
    pid_l = tl.program_id(1)
    b = pid_bd // dim
    d = pid_bd % dim
    offs = pid_l * BLOCK_L + tl.arange(0, BLOCK_L)
    acc = tl.zeros([BLOCK_L], dtype=tl.float32) + tl.load(b_ptr + d, mask=row_mask)[:, None]
    for j in tl.static_range(WIDTH):
        src = offs - (WIDTH - 1) + j
        x = tl.load(x_ptr + b[:, None] * stride_xb + d[:, None] * stride_xd + src[None, :], mask=row_mask[:, None] & ((src >= 0) & (src < seqlen)), other=0.0)
        acc += x * tl.load(w_ptr + d * WIDTH + j, mask=row_mask)[:, None]
    acc = acc * tl.sigmoid(acc)  # SiLU activation, as in causal_conv1d(activation="silu")
    tl.store(out_ptr + b[:, None] * stride_ob + d[:, None] * stride_od + offs[None, :], acc, mask=row_mask[:, None] & (offs < seqlen))


def causal_conv1d(x, weight, bias):
    batch, dim, seqlen = x.shape
    width = weight.shape[1]
    out = torch.empty_like(x)
    BLOCK_L = 64
    BLOCK_M = max(1, min(4096 // BLOCK_L, triton.next_power_of_2(batch * dim), triton.next_power_of_2(triton.cdiv((batch * dim) * triton.cdiv(seqlen, 64), 528))))
    causal_conv1d_kernel[(triton.cdiv(batch * dim, BLOCK_M), triton.cdiv(seqlen, 64))](x, weight, bias, out, dim, seqlen, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
                               batch * dim,
                               WIDTH=width, BLOCK_L=BLOCK_L, BLOCK_M=BLOCK_M, num_warps=4)
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
