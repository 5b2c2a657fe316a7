import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Matrix multiplication, scaling, then GELU."""

    def __init__(self, scale):
        super(Model, self).__init__()
        self.scale = scale

    def forward(self, a, b):
        y = torch.matmul(a, b)
        y = y * self.scale
        return F.gelu(y)


M = 33
K = 48
N = 40
scale = 0.5


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return [scale]
