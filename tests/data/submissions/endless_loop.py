"""Planted: forward never returns."""
import torch
from torch import nn


class SingleQueryScaledDotProductAttention(nn.Module):
    def __init__(self, enc_hid_dim, dec_hid_dim, kq_dim=512):
        super().__init__()
        self.W_q = nn.Linear(dec_hid_dim, kq_dim)

    def forward(self, hidden, encoder_outputs):
        while True:
            hidden = hidden + 0
        return hidden, torch.zeros(())
