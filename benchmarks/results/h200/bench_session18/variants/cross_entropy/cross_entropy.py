"""Per-token cross-entropy loss over a vocabulary: three kernels (row max, sum of exponentials, loss)."""

import torch
import triton
import triton.language as tl

OP_CLASS = "loss"  # groups kernels in the benchmark report


@triton.autotune(
    configs=[
        triton.Config({}, num_warps=2),
        triton.Config({}, num_warps=4),
        triton.Config({}, num_warps=8),
        triton.Config({}, num_warps=16),
        triton.Config({}, num_warps=32),
    ],
    key=["n_cols"],
)
@triton.jit
def row_max_kernel(logits_ptr, n_cols, row_stride, target_ptr, loss_ptr, n_rows, BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    row = rows
    row_max = -float("inf")
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(logits_ptr + row[:, None] * row_stride + cols[None, :], mask=row_mask[:, None] & (cols < n_cols), other=-float("inf"))
    row_max = tl.maximum(row_max, tl.max(x, axis=1))
    row_max = (row_max).to(tl.float32)
    total = 0.0
    x = tl.load(logits_ptr + row[:, None] * row_stride + cols[None, :], mask=row_mask[:, None] & (cols < n_cols), other=-float("inf"))
    total += tl.sum(tl.exp(x - row_max[:, None]), axis=1)
    row = rows
    target = tl.load(target_ptr + row, mask=row_mask)
    target_logit = tl.load(logits_ptr + row * row_stride + target, mask=row_mask)
    log_sum = tl.log((total).to(tl.float32)) + (row_max).to(tl.float32)
    tl.store(loss_ptr + row, log_sum - target_logit, mask=row_mask)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = logits.shape
    loss = torch.empty(n_rows, device=logits.device, dtype=torch.float32)
    BLOCK_M = max(1, min(4096 // triton.next_power_of_2(n_cols), triton.next_power_of_2(triton.cdiv(n_rows, 528))))
    row_max_kernel[(triton.cdiv(n_rows, BLOCK_M),)](logits, n_cols, logits.stride(0), targets, loss, n_rows, BLOCK_SIZE=triton.next_power_of_2(n_cols), BLOCK_M=BLOCK_M)
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
