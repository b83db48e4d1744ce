"""A submission that imports a package the course machine does not have."""
import torch
from torch import nn

import attention_helpers_from_my_laptop  # noqa: F401 (not installed anywhere)


class SingleQueryScaledDotProductAttention(nn.Module):
    def __init__(self, enc_hid_dim, dec_hid_dim, kq_dim=512):
        super().__init__()

    def forward(self, hidden, encoder_outputs):
        alpha = torch.softmax(encoder_outputs.sum(-1).t(), dim=1)
        return (alpha.t().unsqueeze(-1) * encoder_outputs).sum(0), alpha
