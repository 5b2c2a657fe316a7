"""Attention forward, softmax(Q K^T / sqrt(d)) V, with the scores materialised: three kernels
(scores, row softmax, probabilities times V), small tiles, one stage."""

import torch
import triton
import triton.language as tl

OP_CLASS = "attention"  # groups kernels in the benchmark report
ENTRY = "attention"  # the host function (the corpus tests read this file too)


@triton.jit
def pv_kernel(
    v_ptr, o_ptr, seq_len,
    stride_vh, stride_vs, stride_oh, stride_os,
    q_ptr, k_ptr, scale, stride_qh, stride_qs, stride_kh, stride_ks,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    q = tl.load(q_ptr + head * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=offs_m[:, None] < seq_len, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for k in range(0, seq_len, BLOCK_K):
        pid_n = (k // BLOCK_K)
        offs_n = pid_n * BLOCK_K + tl.arange(0, BLOCK_K)
        if EVEN_N:
            k_qk = tl.load(k_ptr + head * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :])
        else:
            k_qk = tl.load(k_ptr + head * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :],
                        mask=offs_n[:, None] < seq_len, other=0.0)
        s = tl.dot(q, tl.trans(k_qk)) * scale
        if EVEN_N:
            s = s.to(tl.float32) * 1.4426950408889634
        else:
            s = tl.where((k + offs_k)[None, :] < seq_len, s.to(tl.float32) * 1.4426950408889634, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        m_i = m_new
        p = p.to(q_ptr.dtype.element_ty)
        if EVEN_N:
            v = tl.load(v_ptr + head * stride_vh + (k + offs_k)[:, None] * stride_vs + offs_d[None, :])
        else:
            v = tl.load(v_ptr + head * stride_vh + (k + offs_k)[:, None] * stride_vs + offs_d[None, :],
                        mask=(k + offs_k)[:, None] < seq_len, other=0.0)
        acc += tl.dot(p, v)
    acc = acc / l_i[:, None]
    tl.store(o_ptr + head * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
             acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    batch, heads, seq_len, head_dim = q.shape
    q3 = q.reshape(batch * heads, seq_len, head_dim)
    k3 = k.reshape(batch * heads, seq_len, head_dim)
    v3 = v.reshape(batch * heads, seq_len, head_dim)
    out = torch.empty_like(q3)
    BLOCK_M = 64
    BLOCK_N = 32
    BLOCK_K = 64
    pv_kernel[(triton.cdiv(seq_len, BLOCK_M), batch * heads)](
        v3, out, seq_len,
        v3.stride(0), v3.stride(1), out.stride(0), out.stride(1),
        q3, k3, head_dim ** -0.5, q3.stride(0), q3.stride(1), k3.stride(0), k3.stride(1),
        HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_K=BLOCK_K, EVEN_N=seq_len % BLOCK_K == 0, num_warps=4, num_stages=3,
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
