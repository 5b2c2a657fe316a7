"""C = A @ B.T with B stored (N, K) as a linear layer's weight: naive tiles that read B through its strides."""

import torch
import triton
import triton.language as tl


def _tma_ready(tensor, unit_stride, *strides):
    """Whether TMA reads ``tensor`` as the kernel does: unit innermost stride, 16-byte-aligned base and strides."""
    return unit_stride == 1 and tensor.data_ptr() % 16 == 0 and all(
        stride * tensor.element_size() % 16 == 0 for stride in strides)


def _tma_allocator(size: int, alignment: int, stream):
    """Global memory for the device-side TMA descriptors."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


triton.set_allocator(_tma_allocator)


def _num_sms() -> int:
    """The GPU's multiprocessor count: how many programs a persistent kernel runs (4 without a GPU)."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return 4


OP_CLASS = "matmul"  # groups kernels in the benchmark report


@triton.jit
def matmul_bt_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bn, stride_bk,
    stride_cm, stride_cn,
    bias_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_TMA: tl.constexpr,
):
    offs_k = tl.arange(0, BLOCK_K)
    if USE_TMA:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1], block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1], block_shape=[BLOCK_N, BLOCK_K])
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1], block_shape=[BLOCK_M, BLOCK_N])
    for tile in tl.range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N), tl.num_programs(0)):
        pid_m = tile % tl.cdiv(M, BLOCK_M)
        pid_n = tile // tl.cdiv(M, BLOCK_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            if USE_TMA:
                a = a_desc.load([pid_m * BLOCK_M, k])
                b = b_desc.load([pid_n * BLOCK_N, k]).T
            else:
                a = tl.load(
                    a_ptr + offs_m[:, None] * stride_am + (k + offs_k)[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0,
                )
                b = tl.load(
                    b_ptr + (k + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=((k + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0,
                )
            acc += tl.dot(a, b)
        acc = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        acc0, acc1 = tl.split(acc)
        for half in tl.static_range(2):
            acc_h = acc0 if half == 0 else acc1
            offs_h = pid_n * BLOCK_N + half * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
            y_val = (acc_h.to(c_ptr.dtype.element_ty)).to(c_ptr.dtype.element_ty)
            bias_val = tl.load(bias_ptr + offs_h[None, :], mask=(offs_m[:, None] < M) & (offs_h[None, :] < N), other=0.0)
            z = y_val.to(tl.float32) + bias_val.to(tl.float32)
            out = 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))
            tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_h[None, :] * stride_cn, out.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_h[None, :] < N))


def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    M, K = x.shape
    N, K2 = weight.shape
    assert K == K2, "inner dimensions differ"
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    BLOCK_M = 128
    BLOCK_N = 256
    BLOCK_K = 64
    grid = (min(_num_sms(), triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)),)
    matmul_bt_kernel[grid](
        x, weight, y, M, N, K,
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), y.stride(0), y.stride(1),
        bias, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        num_warps=8, num_stages=3, USE_TMA=_tma_ready(x, x.stride(1), x.stride(0)) and _tma_ready(weight, weight.stride(1), weight.stride(0)),
    )
    return y


SIZES = {"cuda": {"m": 8192, "n": 8192, "k": 4096}, "cpu": {"m": 64, "n": 48, "k": 80}}


def get_inputs(device: str = "cuda", m: int | None = None, n: int | None = None, k: int | None = None):
    size = SIZES["cpu" if str(device).startswith("cpu") else "cuda"]
    m, n, k = m or size["m"], n or size["n"], k or size["k"]
    x = torch.randn(m, k, device=device, dtype=torch.float16)
    # Scaled like an initialised layer so the pre-activations sit around N(0, 1), where gelu bends.
    weight = (torch.randn(n, k, device=device) / k ** 0.5).to(torch.float16)
    bias = 0.1 * torch.randn(n, device=device, dtype=torch.float16)
    return [x, weight, bias]


def eager(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(torch.nn.functional.linear(x, weight, bias))


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return eager(x.float(), weight.float(), bias.float()).to(x.dtype)


def roofline_cost(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> dict:
    (m, k), n = x.shape, weight.shape[0]
    moved = (m * k + n * k + n + m * n) * x.element_size()
    return {"bytes": moved, "flops": 2 * m * n * k + 8 * m * n}
