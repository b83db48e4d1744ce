"""Planted: a syntax error."""
from torch import nn


class SingleQueryScaledDotProductAttention(nn.Module):
    def __init__(self, enc_hid_dim, dec_hid_dim, kq_dim=512)
        super().__init__()
