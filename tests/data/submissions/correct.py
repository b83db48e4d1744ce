"""A correct submission: single-query scaled dot-product attention (Vaswani et al. 2017, Eq. 1)."""
import math

import torch
from torch import nn


class SingleQueryScaledDotProductAttention(nn.Module):
    def __init__(self, enc_hid_dim, dec_hid_dim, kq_dim=512):
        super().__init__()
        self.W_q = nn.Linear(dec_hid_dim, kq_dim)
        self.W_k = nn.Linear(2 * enc_hid_dim, kq_dim)
        self.kq_dim = kq_dim

    def forward(self, hidden, encoder_outputs):
        q = self.W_q(hidden)                                   # [B, d]
        k = self.W_k(encoder_outputs)                          # [S, B, d]
        scores = (k * q.unsqueeze(0)).sum(-1).t() / math.sqrt(self.kq_dim)   # [B, S]
        alpha = torch.softmax(scores, dim=1)
        attended_val = (alpha.t().unsqueeze(-1) * encoder_outputs).sum(0)     # [B, 2 * enc_hid_dim]
        return attended_val, alpha
