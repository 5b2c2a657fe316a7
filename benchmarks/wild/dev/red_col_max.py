"""Column-wise max of an [M, N] fp32 matrix: one program per column walking down the rows (strided, uncoalesced)."""

import torch
import triton
import triton.language as tl


@triton.jit
def col_max_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr):
    col = tl.program_id(0)
    acc = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        x = tl.load(x_ptr + rows * N + col, mask=rows < M, other=float("-inf"))
        acc = tl.maximum(acc, x)
    tl.store(out_ptr + col, tl.max(acc, axis=0))


def col_max(x):
    M, N = x.shape
    out = torch.empty(N, device=x.device, dtype=x.dtype)
    col_max_kernel[(N,)](x, out, M, N, BLOCK_M=128)
    return out


def get_inputs(device: str = "cuda", M: int = 8192, N: int = 8192):
    return [torch.randn(M, N, device=device)]


def reference(x):
    return x.amax(dim=0)
