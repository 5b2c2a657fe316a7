"""Embedding backward as an index_add_ of rows with tl.atomic_add: each token's fp32 output gradient is
added into the row of its id in a zeroed [vocab, dim] table (what torch's embedding_dense_backward and
index_add_(0, ids, grad) compute). Liger-Kernel's embedding backward does this with tl.atomic_add over
(token block, column block) tiles and FlagGems has an index_add kernel; this is the first-port shape of it.

Naive the way a first version is: one program per source row, walking the row in literal 128-column
chunks with one masked atomic add per chunk, so a row is many small atomics and repeated ids contend on
the same addresses; no sorting or segment reduction of equal ids before the adds, and the table zeroed by a
separate torch.zeros. Repeated ids make the summation order vary between runs; the reference sums in
float64, and the fp32 values are small sums of a few standard-normal terms.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def embedding_backward_kernel(
    grad_out_ptr, ids_ptr, grad_weight_ptr,
    dim,
    stride_go, stride_gw,
    BLOCK_D: tl.constexpr,
):
    row = tl.program_id(0)
    idx = tl.load(ids_ptr + row)
    for start in range(0, dim, BLOCK_D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = cols < dim
        g = tl.load(grad_out_ptr + row * stride_go + cols, mask=mask, other=0.0)
        tl.atomic_add(grad_weight_ptr + idx * stride_gw + cols, g, mask=mask)


def embedding_backward(grad_output, ids, num_embeddings):
    dim = grad_output.shape[-1]
    grad_2d = grad_output.reshape(-1, dim)
    ids_flat = ids.reshape(-1)
    n_rows = ids_flat.numel()
    grad_weight = torch.zeros((num_embeddings, dim), device=grad_output.device, dtype=torch.float32)
    embedding_backward_kernel[(n_rows,)](
        grad_2d, ids_flat, grad_weight,
        dim,
        grad_2d.stride(0), grad_weight.stride(0),
        BLOCK_D=128,
    )
    return grad_weight


def get_inputs(device: str = "cuda", batch: int = 4, seq_len: int = 4096, vocab: int = 32000, dim: int = 1000):
    grad_output = torch.randn(batch, seq_len, dim, device=device, dtype=torch.float32)
    ids = torch.randint(0, vocab, (batch, seq_len), device=device, dtype=torch.int64)
    return [grad_output, ids, vocab]


def reference(grad_output, ids, num_embeddings):
    dim = grad_output.shape[-1]
    table = torch.zeros(num_embeddings, dim, device=grad_output.device, dtype=torch.float64)
    table.index_add_(0, ids.reshape(-1), grad_output.reshape(-1, dim).double())
    return table.float()


def eager(grad_output, ids, num_embeddings):
    """The row index_add in the inputs' fp32."""
    dim = grad_output.shape[-1]
    table = torch.zeros(num_embeddings, dim, device=grad_output.device, dtype=grad_output.dtype)
    return table.index_add_(0, ids.reshape(-1), grad_output.reshape(-1, dim))
