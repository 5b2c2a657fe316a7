"""Attention as three KernelBench-style kernels (scores, softmax, weighted sum), nothing fused yet."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


def _num_sms() -> int:
    """The GPU's multiprocessor count: how many programs a persistent kernel runs (4 without a GPU)."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return 4


batch_size = 4
seq_len = 1024
head_dim = 64


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_D": 32}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_D": 32}, num_warps=4, num_stages=2),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_D": 32}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_D": 16}, num_warps=4, num_stages=2),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_D": 16}, num_warps=2, num_stages=2),
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_D": 32}, num_warps=4, num_stages=3),
    ],
    key=["seq", "dim"],
)
@triton.jit
def scores_kernel(q_ptr, k_ptr, s_ptr, seq, dim, scale, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_D: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    b = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rd = tl.arange(0, BLOCK_D)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for d0 in range(0, dim, BLOCK_D):
        q = tl.load(q_ptr + b * seq * dim + rm[:, None] * dim + (d0 + rd)[None, :],
                    mask=(rm[:, None] < seq) & ((d0 + rd)[None, :] < dim), other=0.0)
        k = tl.load(k_ptr + b * seq * dim + rn[None, :] * dim + (d0 + rd)[:, None],
                    mask=(rn[None, :] < seq) & ((d0 + rd)[:, None] < dim), other=0.0)
        acc += tl.dot(q, k, input_precision="ieee")
    tl.store(s_ptr + b * seq * seq + rm[:, None] * seq + rn[None, :], acc * scale,
             mask=(rm[:, None] < seq) & (rn[None, :] < seq))


@triton.jit
def softmax_rows_kernel(s_ptr, p_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(s_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(p_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


@triton.jit
def weighted_sum_kernel(p_ptr, v_ptr, o_ptr, seq, dim, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
                        BLOCK_K: tl.constexpr, b_count):
    rd = tl.arange(0, BLOCK_D)
    rk = tl.arange(0, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tl.cdiv(seq, 32) * b_count, tl.num_programs(0)):
        pid_m = tile % tl.cdiv(seq, 32)
        b = tile // tl.cdiv(seq, 32)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        for k0 in range(0, seq, BLOCK_K):
            p = tl.load(p_ptr + b * seq * seq + rm[:, None] * seq + (k0 + rk)[None, :],
                        mask=(rm[:, None] < seq) & ((k0 + rk)[None, :] < seq), other=0.0)
            v = tl.load(v_ptr + b * seq * dim + (k0 + rk)[:, None] * dim + rd[None, :],
                        mask=((k0 + rk)[:, None] < seq) & (rd[None, :] < dim), other=0.0)
            acc += tl.dot(p, v, input_precision="ieee")
        tl.store(o_ptr + b * seq * dim + rm[:, None] * dim + rd[None, :], acc,
                 mask=(rm[:, None] < seq) & (rd[None, :] < dim))


class Model(nn.Module):
    """softmax(q k^T / sqrt(d)) v in PyTorch."""

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        scores = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5)
        return torch.softmax(scores, dim=-1) @ v


class ModelNew(nn.Module):
    """The same through three Triton kernels with fp32 intermediates in global memory."""

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        B, S, D = q.shape
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        scores = torch.empty((B, S, S), device=q.device, dtype=torch.float32)
        probs = torch.empty_like(scores)
        out = torch.empty((B, S, D), device=q.device, dtype=torch.float32)
        scores_kernel[lambda META: (triton.cdiv(S, META["BLOCK_M"]), triton.cdiv(S, META["BLOCK_N"]), B)](q, k, scores, S, D, D ** -0.5)
        softmax_rows_kernel[(B * S,)](scores, probs, S, BLOCK=triton.next_power_of_2(S))
        weighted_sum_kernel[(min(_num_sms(), triton.cdiv(S, 32) * B),)](probs, v, out, S, D, BLOCK_M=32,
                                                   BLOCK_D=triton.next_power_of_2(D), BLOCK_K=32, b_count=B)
        return out


def get_inputs(batch: int = batch_size, seq: int = seq_len, dim: int = head_dim):
    q = torch.randn(batch, seq, dim)
    k = torch.randn(batch, seq, dim)
    v = torch.randn(batch, seq, dim)
    return [q, k, v]


def get_init_inputs():
    return []
