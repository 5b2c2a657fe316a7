"""Causal softmax over attention scores [batch, heads, q, k] in fp16, lightllm-token-softmax style: 3-D grid."""

import torch
import triton
import triton.language as tl


@triton.jit
def _fwd_kernel_causal_softmax(Logics, Prob_Out,
                               stride_lb, stride_lh, stride_lq,
                               stride_pb, stride_ph, stride_pq,
                               q_len, k_len, sm_scale,
                               BLOCK_SIZE: tl.constexpr):
    cur_batch = tl.program_id(0)
    cur_head = tl.program_id(1)
    cur_q = tl.program_id(2)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    # The query at position cur_q sees keys 0 .. cur_q + (k_len - q_len).
    visible = col_offsets <= cur_q + (k_len - q_len)
    in_row = col_offsets < k_len
    row = tl.load(Logics + cur_batch * stride_lb + cur_head * stride_lh + cur_q * stride_lq + col_offsets,
                  mask=in_row, other=-float("inf")).to(tl.float32)
    row = tl.where(visible, row * sm_scale, -float("inf"))
    row = row - tl.max(row, axis=0)
    numerator = tl.exp(row)
    denominator = tl.sum(numerator, axis=0)
    softmax_output = numerator / denominator
    tl.store(Prob_Out + cur_batch * stride_pb + cur_head * stride_ph + cur_q * stride_pq + col_offsets,
             softmax_output.to(Prob_Out.dtype.element_ty), mask=in_row)


@torch.no_grad()
def causal_softmax(scores, sm_scale):
    batch, head_num, q_len, k_len = scores.shape
    prob = torch.empty_like(scores)
    BLOCK_SIZE = triton.next_power_of_2(k_len)
    num_warps = 4
    if BLOCK_SIZE >= 2048:
        num_warps = 8
    if BLOCK_SIZE >= 4096:
        num_warps = 16
    _fwd_kernel_causal_softmax[(batch, head_num, q_len)](
        scores, prob,
        scores.stride(0), scores.stride(1), scores.stride(2),
        prob.stride(0), prob.stride(1), prob.stride(2),
        q_len, k_len, sm_scale,
        num_warps=num_warps,
        BLOCK_SIZE=BLOCK_SIZE,
    )
    return prob


def get_inputs(device: str = "cuda", batch: int = 2, heads: int = 4, q_len: int = 1024, k_len: int = 1024):
    scores = torch.randn(batch, heads, q_len, k_len, device=device, dtype=torch.float16)
    return [scores, 0.125]


def reference(scores, sm_scale):
    q_len, k_len = scores.shape[-2:]
    visible = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device).tril(k_len - q_len)
    s = (scores.float() * sm_scale).masked_fill(~visible, float("-inf"))
    return torch.softmax(s, dim=-1).to(scores.dtype)


def eager(scores, sm_scale):
    """The masked softmax in the input's fp16."""
    q_len, k_len = scores.shape[-2:]
    visible = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device).tril(k_len - q_len)
    return torch.softmax((scores * sm_scale).masked_fill(~visible, float("-inf")), dim=-1)
