"""KL divergence per row (log-prob inputs, Liger-style kernel) checked by test_* functions at module level."""

import torch
import triton
import triton.language as tl


@triton.heuristics({"BLOCK_M": lambda args: max(1, min(min(8192, 1024 * args.get("num_warps", 4)) // args["BLOCK_SIZE"], triton.next_power_of_2(triton.cdiv(args["n_rows"], 528))))})
@triton.jit
def _kldiv_kernel_forward(
    y_ptr,  # [B, S], prediction log-probabilities
    y_stride,
    gt_ptr,  # [B, S], target log-probabilities
    gt_stride,
    loss_ptr,  # [B]
    n_cols,
    eps,
    n_rows,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    pid = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    row_mask = pid < n_rows
    y_ptr += pid * y_stride
    gt_ptr += pid * gt_stride
    loss_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_cols
    y = tl.load(y_ptr[:, None] + offsets[None, :], mask=row_mask[:, None] & mask, other=0.0)
    y_true = tl.load(gt_ptr[:, None] + offsets[None, :], mask=row_mask[:, None] & mask, other=0.0)
    loss = tl.exp(y_true) * (y_true - y)
    loss_sum += tl.sum(tl.where(mask, loss, 0.0), axis=1)
    tl.store(loss_ptr + pid, loss_sum, mask=row_mask)


def kldiv_forward(y_pred, y_true, eps=1e-10):
    BT, V = y_pred.shape
    loss = torch.zeros(BT, device=y_pred.device, dtype=torch.float32)
    _kldiv_kernel_forward[lambda META: (triton.cdiv(BT, META["BLOCK_M"]),)](y_pred, y_pred.stride(0), y_true, y_true.stride(0), loss, V, eps, BT, BLOCK_SIZE=triton.next_power_of_2(V), num_warps=min(16, max(4, triton.next_power_of_2(V) // 256)))
    return loss


def _inputs(B, V, device):
    y_pred = torch.log_softmax(torch.randn(B, V, device=device), dim=-1)
    y_true = torch.log_softmax(torch.randn(B, V, device=device), dim=-1)
    return y_pred, y_true


def test_kldiv_small_vocab(device="cuda"):
    y_pred, y_true = _inputs(16, 1000, device)
    loss = kldiv_forward(y_pred, y_true)
    expected = torch.nn.functional.kl_div(y_pred, y_true, reduction="none", log_target=True).sum(-1)
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    return loss


def test_kldiv_odd_vocab(device="cuda"):
    y_pred, y_true = _inputs(12, 3001, device)
    loss = kldiv_forward(y_pred, y_true)
    expected = torch.nn.functional.kl_div(y_pred, y_true, reduction="none", log_target=True).sum(-1)
    torch.testing.assert_close(loss, expected, rtol=1e-4, atol=1e-5)
    return loss


if __name__ == "__main__":
    test_kldiv_small_vocab()
    test_kldiv_odd_vocab()
