"""gelu(x @ W.T + b): a naive matmul kernel, then the bias and activation as a separate elementwise kernel."""

import torch
import triton
import triton.language as tl


def _num_sms() -> int:
    """The GPU's multiprocessor count: how many programs a persistent kernel runs (4 without a GPU)."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return 4


OP_CLASS = "matmul"  # groups kernels in the benchmark report


@triton.jit
def linear_kernel(
    x_ptr, w_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_xk,
    stride_wn, stride_wk,
    stride_ym, stride_yn,
    bias_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    offs_k = tl.arange(0, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N), tl.num_programs(0)):
        pid_m = tile % tl.cdiv(M, BLOCK_M)
        pid_n = tile // tl.cdiv(M, BLOCK_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            x = tl.load(
                x_ptr + offs_m[:, None] * stride_xm + (k + offs_k)[None, :] * stride_xk,
                mask=(offs_m[:, None] < M) & ((k + offs_k)[None, :] < K), other=0.0,
            )
            w = tl.load(
                w_ptr + (k + offs_k)[:, None] * stride_wk + offs_n[None, :] * stride_wn,
                mask=((k + offs_k)[:, None] < K) & (offs_n[None, :] < N), other=0.0,
            )
            acc += tl.dot(x, w)
        y_val = (acc.to(y_ptr.dtype.element_ty)).to(y_ptr.dtype.element_ty)
        bias_val = tl.load(bias_ptr + offs_n[None, :], mask=offs_n[None, :] < N, other=0.0)
        y = y_val.to(tl.float32)
        bias = bias_val.to(tl.float32)
        z = y + bias
        out = 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))
        tl.store(
            y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn,
            out.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N),
        )


def linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    M, K = x.shape
    N, K2 = weight.shape
    assert K == K2, "inner dimensions differ"
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    BLOCK_M = 128
    BLOCK_N = 256
    BLOCK_K = 64
    grid = (min(_num_sms(), triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)),)
    linear_kernel[grid](
        x, weight, y, M, N, K,
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), y.stride(0), y.stride(1),
        bias, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        num_warps=8, num_stages=3,
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
