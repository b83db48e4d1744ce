"""Single-query scaled dot-product attention in the course handout's form (Vaswani et al. 2017,
Eq. 1, for one query): the class a student completes, plugged into attnmt unchanged.

    q = W_q h_i + b_q,   k_t = W_k h̄_t + b_k,   v_t = h̄_t,
    α_t = softmax_t(q·k_t / √kq_dim),   a = Σ_t α_t v_t

hidden: [batch_size, dec_hid_dim]; encoder_outputs: [src_len, batch_size, enc_hid_dim * 2] (time
first, no mask: attnmt calls it only on the real positions of each sentence).

    attnmt check examples/homework_attention.py:SingleQueryScaledDotProductAttention
    attnmt train --config tiny --attention examples/homework_attention.py:SingleQueryScaledDotProductAttention
"""

import math

import torch
from torch import nn


class SingleQueryScaledDotProductAttention(nn.Module):
    def __init__(self, enc_hid_dim, dec_hid_dim, kq_dim=512):
        super().__init__()
        self.query_projection = nn.Linear(dec_hid_dim, kq_dim)
        self.key_projection = nn.Linear(enc_hid_dim * 2, kq_dim)
        self.scale = 1.0 / math.sqrt(kq_dim)

    def forward(self, hidden, encoder_outputs):
        values = encoder_outputs.transpose(0, 1)                      # [batch, src_len, 2 * enc_hid_dim]
        query = self.query_projection(hidden).unsqueeze(1)            # [batch, 1, kq_dim]
        keys = self.key_projection(values)                            # [batch, src_len, kq_dim]
        scores = torch.bmm(query, keys.transpose(1, 2)).squeeze(1) * self.scale
        alpha = torch.softmax(scores, dim=1)                          # [batch, src_len]
        attended_val = torch.bmm(alpha.unsqueeze(1), values).squeeze(1)
        assert attended_val.shape == (hidden.shape[0], encoder_outputs.shape[2])
        assert alpha.shape == (hidden.shape[0], encoder_outputs.shape[0])
        return attended_val, alpha
