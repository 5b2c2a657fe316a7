"""Attention forward, softmax(Q K^T / sqrt(d)) V, with the scores materialised: three kernels
(scores, row softmax, probabilities times V), small tiles, one stage."""

import torch
import triton
import triton.language as tl

OP_CLASS = "attention"  # groups kernels in the benchmark report
ENTRY = "attention"  # the host function (the corpus tests read this file too)


@triton.jit
def scores_kernel(
    q_ptr, k_ptr, s_ptr, seq_len, scale,
    stride_qh, stride_qs, stride_kh, stride_ks, stride_sh, stride_sm,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    head = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + head * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=offs_m[:, None] < seq_len, other=0.0)
    k = tl.load(k_ptr + head * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :],
                mask=offs_n[:, None] < seq_len, other=0.0)
    s = tl.dot(q, tl.trans(k)) * scale
    tl.store(s_ptr + head * stride_sh + offs_m[:, None] * stride_sm + offs_n[None, :], s,
             mask=(offs_m[:, None] < seq_len) & (offs_n[None, :] < seq_len))


@triton.jit
def row_softmax_kernel(s_ptr, p_ptr, seq_len, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    s_row = s_ptr + row * seq_len
    row_max = -float("inf")
    for start in range(0, seq_len, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        s = tl.load(s_row + cols, mask=cols < seq_len, other=-float("inf"))
        row_max = tl.maximum(row_max, tl.max(s, axis=0))
    denom = 0.0
    for start in range(0, seq_len, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        s = tl.load(s_row + cols, mask=cols < seq_len, other=-float("inf"))
        denom += tl.sum(tl.exp(s - row_max), axis=0)
    for start in range(0, seq_len, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        s = tl.load(s_row + cols, mask=cols < seq_len, other=-float("inf"))
        p = tl.exp(s - row_max) / denom
        tl.store(p_ptr + row * seq_len + cols, p.to(p_ptr.dtype.element_ty), mask=cols < seq_len)


@triton.jit
def pv_kernel(
    p_ptr, v_ptr, o_ptr, seq_len,
    stride_ph, stride_pm, stride_vh, stride_vs, stride_oh, stride_os,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    for k in range(0, seq_len, BLOCK_K):
        p = tl.load(p_ptr + head * stride_ph + offs_m[:, None] * stride_pm + (k + offs_k)[None, :],
                    mask=(offs_m[:, None] < seq_len) & ((k + offs_k)[None, :] < seq_len), other=0.0)
        v = tl.load(v_ptr + head * stride_vh + (k + offs_k)[:, None] * stride_vs + offs_d[None, :],
                    mask=(k + offs_k)[:, None] < seq_len, other=0.0)
        acc += tl.dot(p, v)
    tl.store(o_ptr + head * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
             acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    batch, heads, seq_len, head_dim = q.shape
    q3 = q.reshape(batch * heads, seq_len, head_dim)
    k3 = k.reshape(batch * heads, seq_len, head_dim)
    v3 = v.reshape(batch * heads, seq_len, head_dim)
    scores = torch.empty((batch * heads, seq_len, seq_len), device=q.device, dtype=torch.float32)
    probs = torch.empty((batch * heads, seq_len, seq_len), device=q.device, dtype=q.dtype)
    out = torch.empty_like(q3)
    BLOCK_M = 32
    BLOCK_N = 32
    grid = (triton.cdiv(seq_len, BLOCK_M), triton.cdiv(seq_len, BLOCK_N), batch * heads)
    scores_kernel[grid](
        q3, k3, scores, seq_len, head_dim ** -0.5,
        q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1), scores.stride(0), scores.stride(1),
        HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=4, num_stages=1,
    )
    BLOCK_SIZE = 128
    row_softmax_kernel[(batch * heads * seq_len,)](scores, probs, seq_len, BLOCK_SIZE=BLOCK_SIZE)
    BLOCK_K = 32
    pv_kernel[(triton.cdiv(seq_len, BLOCK_M), batch * heads)](
        probs, v3, out, seq_len,
        probs.stride(0), probs.stride(1), v3.stride(0), v3.stride(1), out.stride(0), out.stride(1),
        HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_K=BLOCK_K, num_warps=4, num_stages=1,
    )
    return out.reshape(batch, heads, seq_len, head_dim)


SIZES = {
    "cuda": {"batch": 4, "heads": 16, "seq_len": 4096, "head_dim": 128},
    "cpu": {"batch": 1, "heads": 2, "seq_len": 80, "head_dim": 32},
}


def get_inputs(device: str = "cuda", batch: int | None = None, heads: int | None = None,
               seq_len: int | None = None, head_dim: int | None = None):
    size = SIZES["cpu" if str(device).startswith("cpu") else "cuda"]
    shape = (batch or size["batch"], heads or size["heads"], seq_len or size["seq_len"], head_dim or size["head_dim"])
    return [torch.randn(shape, device=device, dtype=torch.float16) for _ in range(3)]


def eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
    return (torch.softmax(scores, dim=-1) @ v.float()).to(q.dtype)


def roofline_cost(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> dict:
    batch, heads, seq_len, head_dim = q.shape
    return {"bytes": 4 * q.numel() * q.element_size(), "flops": 4 * batch * heads * seq_len * seq_len * head_dim}
