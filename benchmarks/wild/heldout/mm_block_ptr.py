"""Matmul over block-addressed tiles (the block-pointer tutorial, in tensor descriptors since Triton 3.7), 32x32x32."""

import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel_with_block_pointers(
        a_ptr, b_ptr, c_ptr,
        M, N, K,
        stride_am, stride_ak,
        stride_bk, stride_bn,
        stride_cm, stride_cn,
        BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr):
    # Triton 3.7+ removed tl.make_block_ptr; tensor descriptors are its successor (same tiles, zero padding).
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, stride_ak],
                                       block_shape=[BLOCK_SIZE_M, BLOCK_SIZE_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, stride_bn],
                                       block_shape=[BLOCK_SIZE_K, BLOCK_SIZE_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, stride_cn],
                                       block_shape=[BLOCK_SIZE_M, BLOCK_SIZE_N])
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_SIZE_K):
        a = a_desc.load([pid_m * BLOCK_SIZE_M, k])
        b = b_desc.load([k, pid_n * BLOCK_SIZE_N])
        accumulator += tl.dot(a, b)
    c = accumulator.to(tl.float16)
    c_desc.store([pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N], c)


def _alloc(size: int, alignment: int, stream):
    return torch.empty(size, device="cuda" if torch.cuda.is_available() else "cpu", dtype=torch.int8)


def matmul(a, b):
    triton.set_allocator(_alloc)  # device-side descriptors need global scratch on the GPU
    assert a.shape[1] == b.shape[0], "Incompatible dimensions"
    M, K = a.shape
    K, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K = 32, 32, 32
    grid = (triton.cdiv(M, BLOCK_SIZE_M), triton.cdiv(N, BLOCK_SIZE_N))
    matmul_kernel_with_block_pointers[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_SIZE_M=BLOCK_SIZE_M, BLOCK_SIZE_N=BLOCK_SIZE_N, BLOCK_SIZE_K=BLOCK_SIZE_K,
        num_warps=4, num_stages=1)
    return c


def get_inputs(device: str = "cuda", M: int = 4000, N: int = 4096, K: int = 4096):
    a = torch.randn((M, K), device=device, dtype=torch.float16)
    b = torch.randn((K, N), device=device, dtype=torch.float16)
    return [a, b]


def reference(a, b):
    return (a.float() @ b.float()).to(torch.float16)


def eager(a, b):
    """The fp16 matmul a user calls."""
    return torch.matmul(a, b)


if __name__ == "__main__":
    a, b = get_inputs()
    torch.testing.assert_close(matmul(a, b), reference(a, b), atol=1e-2, rtol=1e-2)
    print("✅ Triton and Torch match")
