import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer, its upper triangle (no Triton lowering yet), then tanh."""

    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.fc(x)
        x = torch.triu(x)
        return torch.tanh(x)


batch_size = 20
in_features = 36
out_features = 18


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
