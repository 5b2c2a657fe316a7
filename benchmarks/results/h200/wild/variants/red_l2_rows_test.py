"""Row-wise L2 norms as a test file: the kernel plus test_* functions that return what they check."""

import torch
import triton
import triton.language as tl


@triton.jit
def row_l2_kernel(x_ptr, out_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = 0.0
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += tl.sum(x * x, axis=0)
    tl.store(out_ptr + row, tl.sqrt(acc))


def row_l2(x):
    n_rows, n_cols = x.shape
    out = torch.empty(n_rows, device=x.device, dtype=torch.float32)
    row_l2_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=4096)
    return out


def test_row_l2_fp32(device="cuda"):
    torch.manual_seed(0)
    x = torch.randn(40, 300, device=device)
    out = row_l2(x)
    torch.testing.assert_close(out, torch.linalg.vector_norm(x, dim=1), rtol=1e-4, atol=1e-4)
    return out


def test_row_l2_fp16_strided(device="cuda"):
    torch.manual_seed(1)
    x = torch.randn(24, 1024, device=device, dtype=torch.float16)[:, :700]
    out = row_l2(x)
    torch.testing.assert_close(out, torch.linalg.vector_norm(x.float(), dim=1), rtol=1e-3, atol=1e-3)
    return out


if __name__ == "__main__":
    test_row_l2_fp32()
    test_row_l2_fp16_strided()
    print("passed")
