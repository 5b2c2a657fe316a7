"""KernelBench level-1 BatchNorm2d in eval mode: ModelNew applies the running statistics with a flat 1-D kernel."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 8
features = 32
dim1 = 256
dim2 = 256


@triton.jit
def batchnorm_eval_kernel(x_ptr, mean_ptr, var_ptr, w_ptr, b_ptr, y_ptr, n_elements, C, HW, eps,
                          BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    c = (offs // HW) % C
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    mean = tl.load(mean_ptr + c, mask=mask, other=0.0)
    var = tl.load(var_ptr + c, mask=mask, other=1.0)
    w = tl.load(w_ptr + c, mask=mask, other=1.0)
    b = tl.load(b_ptr + c, mask=mask, other=0.0)
    y = (x - mean) / tl.sqrt(var + eps) * w + b
    tl.store(y_ptr + offs, y, mask=mask)


class Model(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features=num_features)
        with torch.no_grad():  # non-trivial running statistics, as after training
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


class ModelNew(Model):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        N, C, H, W = x.shape
        y = torch.empty_like(x)
        n = x.numel()
        bn = self.bn
        batchnorm_eval_kernel[(triton.cdiv(n, 1024),)](x, bn.running_mean, bn.running_var, bn.weight, bn.bias, y,
                                                      n, C, H * W, bn.eps, BLOCK_SIZE=1024)
        return y


def get_inputs(batch: int = batch_size, height: int = dim1, width: int = dim2):
    return [torch.randn(batch, features, height, width)]


def get_init_inputs():
    return [features]
