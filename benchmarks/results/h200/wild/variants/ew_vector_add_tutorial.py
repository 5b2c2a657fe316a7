"""Vector addition exactly as one first writes it from the Triton tutorial: literal grid, BLOCK_SIZE=128."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr,  # *Pointer* to first input vector.
               y_ptr,  # *Pointer* to second input vector.
               output_ptr,  # *Pointer* to output vector.
               n_elements,  # Size of the vector.
               BLOCK_SIZE: tl.constexpr,  # Number of elements each program should process.
               ):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = x + y
    tl.store(output_ptr + offsets, output, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor):
    output = torch.empty_like(x)
    n_elements = output.numel()
    BLOCK_SIZE = 1024
    add_kernel[(triton.cdiv(n_elements, BLOCK_SIZE),)](x, y, output, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return output


def get_inputs(device: str = "cuda", size: int = 98432 * 256):
    x = torch.rand(size, device=device)
    y = torch.rand(size, device=device)
    return [x, y]


def reference(x, y):
    return x + y


if __name__ == "__main__":
    torch.manual_seed(0)
    x, y = get_inputs()
    output_triton = add(x, y)
    print(f"The maximum difference between torch and triton is "
          f"{torch.max(torch.abs(output_triton - reference(x, y)))}")
