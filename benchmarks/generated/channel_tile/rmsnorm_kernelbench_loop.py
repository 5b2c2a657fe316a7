"""KernelBench level-1 RMSNorm over the feature dim of [batch, features, dim1, dim2]: one program per (batch, spatial block)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 4
features = 32
dim1 = 256
dim2 = 256


@triton.jit
def rms_norm_channels_kernel(x_ptr, y_ptr, C, S, eps, BLOCK_S: tl.constexpr):
    b = tl.program_id(0)
    pid_s = tl.program_id(1)
    offs_s = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    mask = offs_s < S
    base = b * C * S
    acc = tl.zeros([BLOCK_S], dtype=tl.float32)
    for c in range(0, C):
        x = tl.load(x_ptr + base + c * S + offs_s, mask=mask, other=0.0)
        acc += x * x
    rms = tl.sqrt(acc / C + eps)
    for c in range(0, C):
        x = tl.load(x_ptr + base + c * S + offs_s, mask=mask, other=0.0)
        tl.store(y_ptr + base + c * S + offs_s, x / rms, mask=mask)


class Model(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)
        return x / rms


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, C = x.shape[:2]
        S = x[0, 0].numel()
        y = torch.empty_like(x)
        rms_norm_channels_kernel[(B, triton.cdiv(S, 256))](x, y, C, S, self.eps, BLOCK_S=256)
        return y


def get_inputs(batch: int = batch_size, height: int = dim1, width: int = dim2):
    x = torch.randn(batch, features, height, width)
    return [x]


def get_init_inputs():
    return [features]
