"""KernelBench-style HardSwish with a per-channel scale over [batch, channels, length], written one element per program, the way a first
(often generated) Triton port of an elementwise op comes out: ``kernel[(x.numel(),)]``, ``idx = tl.program_id(0)``,
scalar loads and stores, the channel found by ``idx // spatial % channels``.

What makes it naive: every program moves one fp32 value, so the GPU spends its time scheduling millions of programs.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

batch_size = 64
channels = 8
length = 16384


@triton.jit
def scaled_hardswish_kernel(x_ptr, scale_ptr, out_ptr, spatial, n_channels, n_programs, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    channel = idx // spatial % n_channels
    x = tl.load(x_ptr + idx, mask=idx < n_programs)
    s = tl.load(scale_ptr + channel, mask=idx < n_programs)
    gate = tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0
    tl.store(out_ptr + idx, x * gate * s, mask=idx < n_programs)


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, channels))

    def forward(self, x):
        return torch.nn.functional.hardswish(x) * self.scale.view(1, -1, 1)


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, channels))

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        spatial = x.shape[2]
        scaled_hardswish_kernel[(triton.cdiv(x.numel(), 1024),)](x, self.scale, out, spatial, x.shape[1], n_programs=x.numel(), BLOCK=1024)
        return out


def get_inputs(batch: int = batch_size, size: int = length):
    return [torch.randn(batch, channels, size)]


def get_init_inputs():
    return [channels]
