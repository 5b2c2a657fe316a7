"""Attention as three kernels: scores Q @ K^T (scaled), a row softmax over them, then P @ V; [B*H, S, D] tensors."""

import math

import torch
import triton
import triton.language as tl

ENTRY = "attention"


@triton.jit
def scores_kernel(q_ptr, k_ptr, s_ptr, seq, scale, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    bh = tl.program_id(2)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    d = tl.arange(0, D)
    q = tl.load(q_ptr + bh * seq * D + rows[:, None] * D + d[None, :], mask=rows[:, None] < seq, other=0.0)
    k = tl.load(k_ptr + bh * seq * D + cols[:, None] * D + d[None, :], mask=cols[:, None] < seq, other=0.0)
    s = tl.dot(q, tl.trans(k)) * scale
    tl.store(s_ptr + bh * seq * seq + rows[:, None] * seq + cols[None, :], s,
             mask=(rows[:, None] < seq) & (cols[None, :] < seq))


@triton.jit
def softmax_kernel(s_ptr, p_ptr, seq, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(s_ptr + row * seq + cols, mask=cols < seq, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(p_ptr + row * seq + cols, e / tl.sum(e, axis=0), mask=cols < seq)


@triton.jit
def pv_kernel(p_ptr, v_ptr, o_ptr, seq, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    bh = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, D)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32)
    for start in range(0, seq, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        p = tl.load(p_ptr + bh * seq * seq + rows[:, None] * seq + cols[None, :],
                    mask=(rows[:, None] < seq) & (cols[None, :] < seq), other=0.0)
        v = tl.load(v_ptr + bh * seq * D + cols[:, None] * D + d[None, :], mask=cols[:, None] < seq, other=0.0)
        acc += tl.dot(p, v)
    tl.store(o_ptr + bh * seq * D + rows[:, None] * D + d[None, :], acc, mask=rows[:, None] < seq)


def attention(q, k, v):
    BH, S, D = q.shape
    scores = torch.empty((BH, S, S), device=q.device, dtype=torch.float32)
    probs = torch.empty_like(scores)
    out = torch.empty_like(q)
    scores_kernel[(triton.cdiv(S, 16), triton.cdiv(S, 16), BH)](q, k, scores, S, 1.0 / math.sqrt(D), D=D,
                                                               BLOCK_M=16, BLOCK_N=16)
    softmax_kernel[(BH * S,)](scores, probs, S, BLOCK=triton.next_power_of_2(S))
    pv_kernel[(triton.cdiv(S, 16), BH)](probs, v, out, S, D=D, BLOCK_M=16, BLOCK_N=16)
    return out


def get_inputs(device="cpu"):
    return [torch.randn(4, 40, 16, device=device) for _ in range(3)]


def reference(q, k, v):
    p = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), dim=-1)
    return p @ v
