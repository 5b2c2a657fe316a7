"""Fused-MoE grouped matmul in vLLM's fused_moe_kernel manner (also SGLang's copy of it).

The host aligns the routed tokens per expert with torch ops, the way vLLM's moe_align_block_size lays
them out: the flat (token, slot) ids sorted by expert, each expert's run padded to a multiple of
BLOCK_SIZE_M with an out-of-range id, one expert id per M block, and the padded total as a one-element
tensor. One program per (M block, N block) reads its A rows through sorted_token_ids // top_k, its B tile
from the block's expert, multiplies by the routing weight and scatters C rows back to [M, top_k, N].

Naive the way a first port is: a literal 16x32x32 config dict (the one the alignment also uses), a flat
row-major program order with no GROUP_SIZE_M swizzle, num_warps=4 and the default num_stages, and a
grid over the worst-case padded length whose surplus blocks exit early.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def fused_moe_kernel(
    # Pointers to matrices
    a_ptr,
    b_ptr,
    c_ptr,
    topk_weights_ptr,
    sorted_token_ids_ptr,
    expert_ids_ptr,
    num_tokens_post_padded_ptr,
    # Matrix dimensions
    N,
    K,
    EM,
    num_valid_tokens,
    # Strides: A is [M, K], B is [E, N, K], C is viewed as [M * top_k, N]
    stride_am,
    stride_ak,
    stride_be,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    # Meta-parameters
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    MUL_ROUTED_WEIGHT: tl.constexpr,
    top_k: tl.constexpr,
    compute_type: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n

    # Blocks past the padded length of the sorted ids have nothing to do.
    num_tokens_post_padded = tl.load(num_tokens_post_padded_ptr)
    if pid_m * BLOCK_SIZE_M >= num_tokens_post_padded:
        return

    offs_token_id = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_token = tl.load(sorted_token_ids_ptr + offs_token_id)
    token_mask = offs_token < num_valid_tokens

    offs_bn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    # Row t of the flat (token, slot) list reads token t // top_k of A.
    a_ptrs = a_ptr + (offs_token[:, None] // top_k * stride_am + offs_k[None, :] * stride_ak)

    off_expert = tl.load(expert_ids_ptr + pid_m)
    b_ptrs = b_ptr + off_expert * stride_be + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=token_mask[:, None] & (offs_k[None, :] < K - k * BLOCK_SIZE_K), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_SIZE_K) & (offs_bn[None, :] < N), other=0.0)
        accumulator += tl.dot(a, b)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk

    if MUL_ROUTED_WEIGHT:
        moe_weight = tl.load(topk_weights_ptr + offs_token, mask=token_mask, other=0)
        accumulator = accumulator * moe_weight[:, None]
    accumulator = accumulator.to(compute_type)

    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_token[:, None] + stride_cn * offs_cn[None, :]
    c_mask = token_mask[:, None] & (offs_cn[None, :] < N)
    tl.store(c_ptrs, accumulator, mask=c_mask)


def moe_align_block_size(topk_ids, block_size, num_experts):
    """Sorted (token, slot) ids padded per expert to a multiple of block_size, the expert of each block, and the
    padded length (torch ops; vLLM does this in a CUDA op)."""
    flat = topk_ids.flatten()
    numel = flat.numel()
    max_num_tokens_padded = numel + num_experts * (block_size - 1)
    max_num_m_blocks = triton.cdiv(max_num_tokens_padded, block_size)

    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    padded_end = torch.cumsum(padded, 0)
    padded_start = padded_end - padded
    unpadded_start = torch.cumsum(counts, 0) - counts

    order = torch.argsort(flat, stable=True)
    expert_of = flat[order].long()
    rank = torch.arange(numel, device=flat.device) - unpadded_start[expert_of]
    sorted_ids = torch.full((max_num_tokens_padded,), numel, dtype=torch.int32, device=flat.device)
    sorted_ids[padded_start[expert_of] + rank] = order.to(torch.int32)

    block_start = torch.arange(max_num_m_blocks, device=flat.device) * block_size
    expert_ids = torch.searchsorted(padded_end, block_start, right=True).clamp_(max=num_experts - 1).to(torch.int32)
    num_tokens_post_padded = padded_end[-1:].to(torch.int32)
    return sorted_ids, expert_ids, num_tokens_post_padded


def fused_moe(hidden_states, w, topk_weights, topk_ids):
    M, K = hidden_states.shape
    E, N, _ = w.shape
    top_k = topk_ids.shape[1]
    config = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32}
    sorted_token_ids, expert_ids, num_tokens_post_padded = moe_align_block_size(topk_ids, config["BLOCK_SIZE_M"], E)
    out = torch.empty((M, top_k, N), device=hidden_states.device, dtype=hidden_states.dtype)
    EM = sorted_token_ids.shape[0]
    grid = lambda META: (triton.cdiv(EM, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)
    fused_moe_kernel[grid](
        hidden_states,
        w,
        out,
        topk_weights,
        sorted_token_ids,
        expert_ids,
        num_tokens_post_padded,
        N,
        K,
        EM,
        topk_ids.numel(),
        hidden_states.stride(0),
        hidden_states.stride(1),
        w.stride(0),
        w.stride(1),
        w.stride(2),
        out.stride(1),
        out.stride(2),
        MUL_ROUTED_WEIGHT=True,
        top_k=top_k,
        compute_type=tl.float16,
        num_warps=4,
        **config,
    )
    return out


def get_inputs(device: str = "cuda", M: int = 3000, N: int = 1000, K: int = 1024, E: int = 8, topk: int = 2):
    hidden_states = torch.randn(M, K, device=device, dtype=torch.float16)
    w = torch.randn(E, N, K, device=device, dtype=torch.float16) / K**0.5
    gating = torch.randn(M, E, device=device, dtype=torch.float32)
    topk_weights, topk_ids = torch.topk(torch.softmax(gating, dim=-1), topk, dim=-1)
    topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    return [hidden_states, w, topk_weights, topk_ids.to(torch.int32)]


def reference(hidden_states, w, topk_weights, topk_ids):
    M, _ = hidden_states.shape
    E, N, _ = w.shape
    out = torch.zeros(M, topk_ids.shape[1], N, device=hidden_states.device, dtype=torch.float32)
    for e in range(E):
        tok, slot = torch.nonzero(topk_ids == e, as_tuple=True)
        out[tok, slot] = hidden_states[tok].float() @ w[e].float().t()
    return (out * topk_weights[..., None]).half()


def eager(hidden_states, w, topk_weights, topk_ids):
    """The expert loop in the inputs' fp16 (routing weights converted once)."""
    M, _ = hidden_states.shape
    E, N, _ = w.shape
    out = torch.zeros(M, topk_ids.shape[1], N, device=hidden_states.device, dtype=hidden_states.dtype)
    for e in range(E):
        tok, slot = torch.nonzero(topk_ids == e, as_tuple=True)
        out[tok, slot] = hidden_states[tok] @ w[e].t()
    return out * topk_weights[..., None].to(out.dtype)
