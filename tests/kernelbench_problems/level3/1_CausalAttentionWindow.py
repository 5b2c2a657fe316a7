import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """minGPT causal self-attention over the last `window` positions: the mask is the top-left T x T of a
    max_seqlen buffer (a slice by a size read from the input) and a longer sequence is cropped first (a branch
    on the input's shape)."""

    def __init__(self, n_embd, n_head, window, max_seqlen):
        super(Model, self).__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("bias", torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen))
        self.n_head = n_head
        self.window = window

    def forward(self, x):
        if x.size(1) > self.window:
            x = x[:, -self.window:, :]
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


batch_size = 2
seq_len = 24
n_embd = 32
n_head = 4
window = 16
max_seqlen = 32


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]


def get_init_inputs():
    return [n_embd, n_head, window, max_seqlen]
