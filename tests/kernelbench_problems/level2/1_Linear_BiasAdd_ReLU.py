import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, plus a learned bias, then ReLU."""

    def __init__(self, in_features, out_features, bias_shape):
        super(Model, self).__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        x = self.fc(x)
        x = x + self.bias
        return torch.relu(x)


batch_size = 48
in_features = 40
out_features = 24
bias_shape = (out_features,)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, bias_shape]
