"""index_select along dim 0 in FlagGems' manner, then a bias add as its own pointwise launch.

The gather is FlagGems' index_select_kernel shape: a 2-D grid over (blocks of index entries, column
blocks), each program loading its BLOCK_M source row numbers with `tl.load(index + rows)` and then the
[BLOCK_M, BLOCK_N] tile of those rows. The bias add that follows is a separate flat 1-D pointwise kernel
over the gathered bf16 tensor (fp32 inside), the bias broadcast with `offsets % N`, as FlagGems' ops
compose when a model calls them one after the other.

Naive the way a first version is: literal tiles of 2 rows x 64 columns (FlagGems tunes BLOCK_M up to 4
and BLOCK_N up to 4096), num_warps=4 for a 128-element tile, and the gathered tensor written to memory
and read back by a second launch instead of adding the bias in the gather.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def index_select_kernel(inp, out, M, N, index, index_len, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_x = tl.program_id(axis=0)
    pid_y = tl.program_id(axis=1)
    rows_offsets = pid_x * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    rows_mask = rows_offsets < index_len
    cols_offsets = pid_y * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    cols_mask = cols_offsets < N

    out_mask = rows_mask & cols_mask

    indices = tl.load(index + rows_offsets, mask=rows_mask, other=0)
    inp_off = indices * N + cols_offsets
    selected = tl.load(inp + inp_off, mask=out_mask, other=0.0)
    out_off = rows_offsets * N + cols_offsets
    tl.store(out + out_off, selected, mask=out_mask)


@triton.jit
def add_bias_kernel(x_ptr, bias_ptr, out_ptr, n_elements, N, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(bias_ptr + offsets % N, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offsets, (x + b).to(out_ptr.dtype.element_ty), mask=mask)


def index_select(inp, index):
    M, N = inp.shape
    index_len = index.numel()
    out = torch.empty((index_len, N), device=inp.device, dtype=inp.dtype)
    grid = lambda meta: (triton.cdiv(index_len, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))
    index_select_kernel[grid](inp, out, M, N, index, index_len, BLOCK_M=2, BLOCK_N=64, num_warps=4)
    return out


def add_bias(x, bias):
    out = torch.empty_like(x)
    n_elements = x.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
    add_bias_kernel[grid](x, bias, out, n_elements, x.shape[-1], BLOCK_SIZE=1024)
    return out


def gather_rows_bias(inp, index, bias):
    selected = index_select(inp, index)
    return add_bias(selected, bias)


def get_inputs(device: str = "cuda", num_rows: int = 32000, dim: int = 3000, num_indices: int = 5000):
    inp = torch.randn(num_rows, dim, device=device, dtype=torch.bfloat16)
    index = torch.randint(0, num_rows, (num_indices,), device=device, dtype=torch.int64)
    bias = torch.randn(dim, device=device, dtype=torch.bfloat16)
    return [inp, index, bias]


def reference(inp, index, bias):
    return (torch.index_select(inp, 0, index).float() + bias.float()).to(torch.bfloat16)


def eager(inp, index, bias):
    """index_select plus the bias in the inputs' bf16."""
    return torch.index_select(inp, 0, index) + bias
