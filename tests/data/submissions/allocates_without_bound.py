"""A submission whose forward keeps everything it ever computed: memory without bound."""
import torch
from torch import nn

KEPT = []


class SingleQueryScaledDotProductAttention(nn.Module):
    def __init__(self, enc_hid_dim, dec_hid_dim, kq_dim=512):
        super().__init__()

    def forward(self, hidden, encoder_outputs):
        while True:  # a cache that never stops growing
            KEPT.append(bytearray(64 * 2**20))
