"""Embedding lookup: int64 token ids gather rows of an fp16 table, 2-D grid of (token, column block)."""

import torch
import triton
import triton.language as tl


@triton.jit
def embedding_kernel(ids_ptr, weight_ptr, out_ptr, n_tokens, dim, BLOCK_D: tl.constexpr):
    tok = tl.program_id(0)
    pid_d = tl.program_id(1)
    idx = tl.load(ids_ptr + tok)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < dim
    row = tl.load(weight_ptr + idx * dim + cols, mask=mask, other=0.0)
    tl.store(out_ptr + tok * dim + cols, row, mask=mask)


def embedding(ids, weight):
    n_tokens = ids.numel()
    vocab, dim = weight.shape
    out = torch.empty((n_tokens, dim), device=weight.device, dtype=weight.dtype)
    BLOCK_D = 128
    embedding_kernel[(n_tokens, triton.cdiv(dim, BLOCK_D))](ids, weight, out, n_tokens, dim, BLOCK_D=BLOCK_D)
    return out.view(*ids.shape, dim)


def get_inputs(device: str = "cuda", batch: int = 4, seq_len: int = 4096, vocab: int = 32000, dim: int = 4096):
    ids = torch.randint(0, vocab, (batch, seq_len), device=device, dtype=torch.int64)
    weight = torch.randn(vocab, dim, device=device, dtype=torch.float16)
    return [ids, weight]


def reference(ids, weight):
    return torch.nn.functional.embedding(ids, weight)
