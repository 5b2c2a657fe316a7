"""Softmax backward in Liger-Kernel's manner (its multi-block backward kernel): dx = y * (dy - sum(dy * y)) per row,
bf16 y/dy/dx, fp32 math inside.

One program per row, row pointers moved by a stride argument, and two passes over the row in column blocks: the
first accumulates the dot sum(dy * y), the second reloads dy and y and writes dx.

What makes it naive: a literal 64-wide column block whatever the row length (a 3000-column row takes 47 blocks
per pass on 4 warps), both inputs read twice from global memory although a whole row fits in registers, and one
short program per row.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_multi_block_backward_kernel(
    dy_ptr, dy_stride,
    y_ptr, y_stride,
    dx_ptr, dx_stride,
    n_cols,
    BLOCK_SIZE: tl.constexpr,
):
    row_id = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    dy_ptr += row_id * dy_stride
    y_ptr += row_id * y_stride
    dx_ptr += row_id * dx_stride

    acc = 0.0
    for start in range(0, n_cols, BLOCK_SIZE):
        idx = start + offs
        mask = idx < n_cols
        dy_blk = tl.load(dy_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        y_blk = tl.load(y_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        acc += tl.sum(dy_blk * y_blk, axis=0)

    for start in range(0, n_cols, BLOCK_SIZE):
        idx = start + offs
        mask = idx < n_cols
        dy_blk = tl.load(dy_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        y_blk = tl.load(y_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        dx_blk = y_blk * (dy_blk - acc)
        tl.store(dx_ptr + idx, dx_blk.to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(dy, y):
    n_cols = y.shape[-1]
    dy2d = dy.reshape(-1, n_cols)
    y2d = y.reshape(-1, n_cols)
    n_rows = y2d.shape[0]
    dx2d = torch.empty_like(dy2d)
    BLOCK_SIZE = 64
    _softmax_multi_block_backward_kernel[(n_rows,)](
        dy2d, dy2d.stride(0),
        y2d, y2d.stride(0),
        dx2d, dx2d.stride(0),
        n_cols,
        BLOCK_SIZE=BLOCK_SIZE,
        num_warps=4,
    )
    return dx2d.view_as(dy)


def get_inputs(device: str = "cuda", rows: int = 16384, n_cols: int = 3000):
    logits = torch.randn(rows, n_cols, device=device, dtype=torch.float32) * 4.0
    y = torch.softmax(logits, dim=-1).to(torch.bfloat16)
    dy = torch.randn(rows, n_cols, device=device, dtype=torch.bfloat16)
    return [dy, y]


def reference(dy, y):
    dyf, yf = dy.float(), y.float()
    return (yf * (dyf - (dyf * yf).sum(dim=-1, keepdim=True))).to(torch.bfloat16)


def eager(dy, y):
    """Softmax's backward in the inputs' bf16."""
    return y * (dy - (dy * y).sum(dim=-1, keepdim=True))
