"""Cross-entropy loss per row in Liger-Kernel's manner: online max/sum over vocab blocks, ignore_index, mean reduction on the host."""

import torch
import triton
import triton.language as tl


@triton.jit
def liger_cross_entropy_kernel(
    X_ptr, X_stride,
    Y_ptr, Y_stride,
    loss_ptr, loss_stride,
    n_cols,
    ignore_index,
    BLOCK_SIZE: tl.constexpr,
):
    program_id = tl.program_id(0).to(tl.int64)
    Y_ptr += program_id * Y_stride
    y = tl.load(Y_ptr)
    X_ptr += program_id * X_stride
    loss_ptr += program_id * loss_stride
    if y == ignore_index:
        tl.store(loss_ptr, 0.0)
        return
    m = float("-inf")
    d = 0.0
    ori_X_y = tl.load(X_ptr + y).cast(tl.float32)
    for i in range(0, n_cols, BLOCK_SIZE):
        X_offsets = i + tl.arange(0, BLOCK_SIZE)
        X_block = tl.load(X_ptr + X_offsets, mask=X_offsets < n_cols, other=float("-inf")).cast(tl.float32)
        block_max = tl.max(X_block)
        m_new = tl.maximum(m, block_max)
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(X_block - m_new))
        m = m_new
    lse = m + tl.log(d)
    tl.store(loss_ptr, lse - ori_X_y)


def cross_entropy_forward(_input, target, ignore_index=-100):
    BT, V = _input.shape
    BLOCK_SIZE = 1024
    loss_1d = torch.zeros(BT, dtype=torch.float32, device=_input.device)
    liger_cross_entropy_kernel[(BT,)](
        X_ptr=_input, X_stride=_input.stride(-2),
        Y_ptr=target, Y_stride=target.stride(-1),
        loss_ptr=loss_1d, loss_stride=loss_1d.stride(-1),
        n_cols=V,
        ignore_index=ignore_index,
        BLOCK_SIZE=BLOCK_SIZE,
        num_warps=32,
    )
    n_non_ignore = (target != ignore_index).sum().clamp_min(1)
    return loss_1d.sum() / n_non_ignore


def get_inputs(device: str = "cuda", bt: int = 8192, vocab: int = 32000):
    logits = torch.randn(bt, vocab, device=device, dtype=torch.float32)
    target = torch.randint(0, vocab, (bt,), device=device, dtype=torch.int64)
    target[::7] = -100
    return [logits, target]


def reference(logits, target):
    return torch.nn.functional.cross_entropy(logits, target, ignore_index=-100)
