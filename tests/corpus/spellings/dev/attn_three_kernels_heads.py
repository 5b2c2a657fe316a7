"""Attention over [B, H, S, D] as three kernels: QK^T scores (2-D grid, heads flattened), softmax rows, P @ V."""

import torch
import triton
import triton.language as tl

ENTRY = "attention"


@triton.jit
def qk_kernel(q_ptr, k_ptr, s_ptr, S, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + head * S * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < S, other=0.0)
    for start_n in range(0, S, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kt = tl.load(k_ptr + head * S * HEAD_DIM + offs_n[None, :] * HEAD_DIM + offs_d[:, None], mask=offs_n[None, :] < S, other=0.0)
        s = tl.dot(q, kt) * sm_scale
        tl.store(s_ptr + head * S * S + offs_m[:, None] * S + offs_n[None, :], s, mask=(offs_m[:, None] < S) & (offs_n[None, :] < S))


@triton.jit
def row_softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf"))
    m = tl.max(x, axis=0)
    num = tl.exp(x - m)
    den = tl.sum(num, axis=0)
    tl.store(y_ptr + row * n_cols + offs, num / den, mask=mask)


@triton.jit
def pv_kernel(p_ptr, v_ptr, o_ptr, S, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    for start_n in range(0, S, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        p = tl.load(p_ptr + head * S * S + offs_m[:, None] * S + offs_n[None, :], mask=(offs_m[:, None] < S) & (offs_n[None, :] < S), other=0.0)
        v = tl.load(v_ptr + head * S * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_n[:, None] < S, other=0.0)
        acc += tl.dot(p, v)
    tl.store(o_ptr + head * S * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=offs_m[:, None] < S)


def attention(q, k, v):
    B, H, S, D = q.shape
    scores = torch.empty((B, H, S, S), device=q.device, dtype=torch.float32)
    qk_kernel[(triton.cdiv(S, 16), B * H)](q, k, scores, S, D ** -0.5, HEAD_DIM=D, BLOCK_M=16, BLOCK_N=16)
    probs = torch.empty_like(scores)
    row_softmax_kernel[(B * H * S,)](scores, probs, S, BLOCK_SIZE=triton.next_power_of_2(S))
    out = torch.empty_like(q)
    pv_kernel[(triton.cdiv(S, 16), B * H)](probs, v, out, S, HEAD_DIM=D, BLOCK_M=16, BLOCK_N=16)
    return out


def get_inputs(device="cpu"):
    return [torch.randn(2, 2, 36, 16, device=device) for _ in range(3)]


def reference(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, dim=-1) @ v
