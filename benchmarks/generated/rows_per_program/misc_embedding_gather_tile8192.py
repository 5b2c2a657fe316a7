"""Embedding lookup: int64 token ids gather rows of an fp16 table, 2-D grid of (token, column block)."""

import torch
import triton
import triton.language as tl


@triton.jit
def embedding_kernel(ids_ptr, weight_ptr, out_ptr, n_tokens, dim, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
    tok = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = tok < n_tokens
    pid_d = tl.program_id(1)
    idx = tl.load(ids_ptr + tok, mask=row_mask)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < dim
    row = tl.load(weight_ptr + idx[:, None] * dim + cols[None, :], mask=row_mask[:, None] & mask, other=0.0)
    tl.store(out_ptr + tok[:, None] * dim + cols[None, :], row, mask=row_mask[:, None] & mask)


def embedding(ids, weight):
    n_tokens = ids.numel()
    vocab, dim = weight.shape
    out = torch.empty((n_tokens, dim), device=weight.device, dtype=weight.dtype)
    BLOCK_D = 128
    BLOCK_M = max(1, min(8192 // BLOCK_D, triton.next_power_of_2(n_tokens), triton.next_power_of_2(triton.cdiv(n_tokens * triton.cdiv(dim, BLOCK_D), 528))))
    embedding_kernel[(triton.cdiv(n_tokens, BLOCK_M), triton.cdiv(dim, BLOCK_D))](ids, weight, out, n_tokens, dim, BLOCK_D=BLOCK_D, BLOCK_M=BLOCK_M, num_warps=8 if BLOCK_M > 1 else 4)
    return out.view(*ids.shape, dim)


def get_inputs(device: str = "cuda", batch: int = 4, seq_len: int = 4096, vocab: int = 32000, dim: int = 4096):
    ids = torch.randint(0, vocab, (batch, seq_len), device=device, dtype=torch.int64)
    weight = torch.randn(vocab, dim, device=device, dtype=torch.float16)
    return [ids, weight]


def reference(ids, weight):
    return torch.nn.functional.embedding(ids, weight)
