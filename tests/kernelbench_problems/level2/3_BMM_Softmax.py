import torch
import torch.nn as nn


class Model(nn.Module):
    """Batched matrix multiplication followed by a softmax over the last dim."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, q, k):
        scores = torch.bmm(q, k)
        return torch.softmax(scores, dim=-1)


batch = 3
seq = 24
head_dim = 32


def get_inputs():
    return [torch.randn(batch, seq, head_dim), torch.randn(batch, head_dim, seq)]


def get_init_inputs():
    return []
