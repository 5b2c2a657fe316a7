"""Per-token cross-entropy loss over a vocabulary: three kernels (row max, sum of exponentials, loss)."""

import torch
import triton
import triton.language as tl

OP_CLASS = "loss"  # groups kernels in the benchmark report


@triton.jit
def row_max_kernel(logits_ptr, max_ptr, n_cols, row_stride, n_rows, BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr):
    row = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = row < n_rows
    row_max = tl.full([BLOCK_M], -float("inf"), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(logits_ptr + row[:, None] * row_stride + cols[None, :], mask=row_mask[:, None] & (cols < n_cols), other=-float("inf"))
        row_max = tl.maximum(row_max, tl.max(x, axis=1))
    tl.store(max_ptr + row, row_max, mask=row_mask)


@triton.jit
def sum_exp_kernel(logits_ptr, max_ptr, sum_ptr, n_cols, row_stride, n_rows, BLOCK_SIZE: tl.constexpr, BLOCK_ROWS: tl.constexpr):
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = row < n_rows
    row_max = tl.load(max_ptr + row, mask=row_mask)
    total = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(logits_ptr + row[:, None] * row_stride + cols[None, :], mask=row_mask[:, None] & (cols < n_cols), other=-float("inf"))
        total += tl.sum(tl.exp(x - row_max[:, None]), axis=1)
    tl.store(sum_ptr + row, total, mask=row_mask)


@triton.jit
def nll_kernel(logits_ptr, target_ptr, max_ptr, sum_ptr, loss_ptr, row_stride):
    row = tl.program_id(0)
    target = tl.load(target_ptr + row)
    target_logit = tl.load(logits_ptr + row * row_stride + target)
    log_sum = tl.log(tl.load(sum_ptr + row)) + tl.load(max_ptr + row)
    tl.store(loss_ptr + row, log_sum - target_logit)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = logits.shape
    row_max = torch.empty(n_rows, device=logits.device, dtype=torch.float32)
    sum_exp = torch.empty(n_rows, device=logits.device, dtype=torch.float32)
    loss = torch.empty(n_rows, device=logits.device, dtype=torch.float32)
    BLOCK_SIZE = 128
    BLOCK_M = max(1, min(8192 // BLOCK_SIZE, triton.next_power_of_2(triton.cdiv(n_rows, 528))))
    row_max_kernel[(triton.cdiv(n_rows, BLOCK_M),)](logits, row_max, n_cols, logits.stride(0), n_rows, BLOCK_SIZE=BLOCK_SIZE, BLOCK_M=BLOCK_M, num_warps=8 if BLOCK_M > 1 else 4)
    BLOCK_ROWS = max(1, min(8192 // BLOCK_SIZE, triton.next_power_of_2(triton.cdiv(n_rows, 528))))
    sum_exp_kernel[(triton.cdiv(n_rows, BLOCK_ROWS),)](logits, row_max, sum_exp, n_cols, logits.stride(0), n_rows, BLOCK_SIZE=BLOCK_SIZE, BLOCK_ROWS=BLOCK_ROWS, num_warps=8 if BLOCK_ROWS > 1 else 4)
    nll_kernel[(n_rows,)](logits, targets, row_max, sum_exp, loss, logits.stride(0))
    return loss


SIZES = {"cuda": {"tokens": 8192, "vocab": 32000}, "cpu": {"tokens": 16, "vocab": 300}}


def get_inputs(device: str = "cuda", tokens: int | None = None, vocab: int | None = None):
    size = SIZES["cpu" if str(device).startswith("cpu") else "cuda"]
    tokens, vocab = tokens or size["tokens"], vocab or size["vocab"]
    logits = 4.0 * torch.randn(tokens, vocab, device=device, dtype=torch.float32)
    targets = torch.randint(0, vocab, (tokens,), device=device, dtype=torch.int64)
    return [logits, targets]


def eager(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits, targets, reduction="none")


def reference(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return eager(logits.double(), targets).to(logits.dtype)


def roofline_cost(logits: torch.Tensor, targets: torch.Tensor) -> dict:
    tokens = logits.shape[0]
    moved = logits.numel() * logits.element_size() + tokens * targets.element_size() + tokens * 4
    return {"bytes": moved, "flops": 4 * logits.numel()}
