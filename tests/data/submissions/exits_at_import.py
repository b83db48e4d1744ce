"""Planted: the file calls sys.exit when it is imported."""
import sys

from torch import nn

sys.exit("bye")


class SingleQueryScaledDotProductAttention(nn.Module):
    def __init__(self, enc_hid_dim, dec_hid_dim, kq_dim=512):
        super().__init__()
