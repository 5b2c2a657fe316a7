"""PLANTED FAULT: the kernel spins on a flag that is never set: it never returns (the worker must be killed)."""

import torch
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, flag_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    # A volatile load and an atomic make the spin loop observable, so the GPU compiler cannot
    # delete it as a side-effect-free infinite loop (it did, with a plain load).
    while tl.load(flag_ptr, volatile=True) == 0:
        tl.atomic_add(flag_ptr + 1, 1)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


def scale_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n_elements = x.numel()
    BLOCK_SIZE = 32
    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
    flag = torch.zeros(2, device=x.device, dtype=torch.int32)
    scale_add_kernel[grid](x, y, out, flag, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return out


def get_inputs(device: str = "cuda", n: int = 90):
    return [torch.randn(n, device=device, dtype=torch.float32), torch.randn(n, device=device, dtype=torch.float32)]


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return 2.0 * x + y
