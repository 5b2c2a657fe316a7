"""Column-wise max of an [M, N] fp32 matrix: one program per column walking down the rows (strided, uncoalesced)."""

import torch
import triton
import triton.language as tl


@triton.jit
def col_max_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_COLS: tl.constexpr):
    col = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_mask = col < N
    acc = tl.full([BLOCK_COLS, BLOCK_M], float("-inf"), dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        x = tl.load(x_ptr + rows * N + col[:, None], mask=col_mask[:, None] & (rows < M), other=float("-inf"))
        acc = tl.maximum(acc, x)
    tl.store(out_ptr + col, tl.max(acc, axis=1), mask=col_mask)


def col_max(x):
    M, N = x.shape
    out = torch.empty(N, device=x.device, dtype=x.dtype)
    BLOCK_M = 128
    BLOCK_COLS = max(1, min(8192 // BLOCK_M, triton.next_power_of_2(triton.cdiv(N, 528))))
    col_max_kernel[(triton.cdiv(N, BLOCK_COLS),)](x, out, M, N, BLOCK_M=BLOCK_M, BLOCK_COLS=BLOCK_COLS, num_warps=8 if BLOCK_COLS > 1 else 4)
    return out


def get_inputs(device: str = "cuda", M: int = 8192, N: int = 8192):
    return [torch.randn(M, N, device=device)]


def reference(x):
    return x.amax(dim=0)
