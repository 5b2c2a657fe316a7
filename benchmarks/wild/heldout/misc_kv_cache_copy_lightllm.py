"""Copy new keys/values into the KV cache at destination slots, the way lightllm's destindex_copy_kv does."""

import torch
import triton
import triton.language as tl


@triton.jit
def _fwd_kernel_destindex_copy_kv(
    K, Dest_loc, Out,
    stride_k_bs, stride_k_h, stride_k_d,
    stride_o_bs, stride_o_h, stride_o_d,
    head_num, head_dim,
    BLOCK_DMODEL: tl.constexpr,
    BLOCK_HEAD: tl.constexpr,
):
    cur_index = tl.program_id(0)
    offs_h = tl.arange(0, BLOCK_HEAD)
    offs_d = tl.arange(0, BLOCK_DMODEL)
    dest_index = tl.load(Dest_loc + cur_index)
    k_ptrs = K + cur_index * stride_k_bs + stride_k_h * offs_h[:, None] + stride_k_d * offs_d[None, :]
    o_ptrs = Out + dest_index * stride_o_bs + stride_o_h * offs_h[:, None] + stride_o_d * offs_d[None, :]
    mask = (offs_h[:, None] < head_num) & (offs_d[None, :] < head_dim)
    k = tl.load(k_ptrs, mask=mask, other=0.0)
    tl.store(o_ptrs, k, mask=mask)


@torch.no_grad()
def destindex_copy_kv(K, DestLoc, Out):
    seq_len = DestLoc.shape[0]
    head_num = K.shape[1]
    head_dim = K.shape[2]
    assert K.shape[1] == Out.shape[1] and K.shape[2] == Out.shape[2]
    BLOCK_HEAD = triton.next_power_of_2(head_num)
    grid = (seq_len,)
    num_warps = 1
    _fwd_kernel_destindex_copy_kv[grid](
        K, DestLoc, Out,
        K.stride(0), K.stride(1), K.stride(2),
        Out.stride(0), Out.stride(1), Out.stride(2),
        head_num, head_dim,
        BLOCK_DMODEL=triton.next_power_of_2(head_dim),
        BLOCK_HEAD=BLOCK_HEAD,
        num_warps=num_warps,
        num_stages=1,
    )
    return Out


def copy_into_cache(k, dest_loc, cache):
    """The cache after the copy (a fresh copy, so verification never sees a mutated input)."""
    out = cache.clone()
    destindex_copy_kv(k, dest_loc, out)
    return out


def get_inputs(device: str = "cuda", tokens: int = 4096, heads: int = 32, head_dim: int = 128):
    cache_slots = 4 * tokens
    k = torch.randn(tokens, heads, head_dim, device=device, dtype=torch.float16)
    dest_loc = torch.randperm(cache_slots, device=device)[:tokens].to(torch.int32)
    cache = torch.zeros(cache_slots, heads, head_dim, device=device, dtype=torch.float16)
    return [k, dest_loc, cache]


def reference(k, dest_loc, cache):
    out = cache.clone()
    out[dest_loc.long()] = k
    return out
