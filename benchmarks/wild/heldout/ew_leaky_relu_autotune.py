"""Leaky ReLU in the FlagGems manner: an autotuned pointwise kernel, META-lambda grid, small configs."""

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 128}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 256}, num_warps=4),
    ],
    key=["n_elements"],
)
@triton.jit
def leaky_relu_kernel(x_ptr, out_ptr, n_elements, negative_slope, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    y = tl.where(x >= 0, x, x * negative_slope)
    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)


def leaky_relu(x: torch.Tensor, negative_slope: float = 0.01) -> torch.Tensor:
    out = torch.empty_like(x)
    n_elements = out.numel()
    grid = lambda META: (triton.cdiv(n_elements, META["BLOCK_SIZE"]),)
    leaky_relu_kernel[grid](x, out, n_elements, negative_slope)
    return out


def get_inputs(device: str = "cuda", rows: int = 8192, cols: int = 4096):
    return [torch.randn(rows, cols, device=device, dtype=torch.float16), 0.1]


def reference(x, negative_slope):
    return torch.nn.functional.leaky_relu(x.float(), negative_slope).to(x.dtype)


def eager(x, negative_slope):
    """leaky_relu in the input's fp16."""
    return torch.nn.functional.leaky_relu(x, negative_slope)


if __name__ == "__main__":
    args = get_inputs()
    torch.testing.assert_close(leaky_relu(*args), reference(*args))
    print("ok")
