"""Single-query scaled dot-product attention, written as a course exercise asks for it.

    q = W_q h,   k_s = W_k h̄_s,   e_s = q·k_s / √d,   α = softmax(e) over the real positions,
    context = Σ_s α_s h̄_s

Check it, train it and compare it with the built-ins:

    attnmt check examples/my_attention.py:MyAttention
    attnmt train --config tiny --attention examples/my_attention.py:MyAttention --out runs/mine

MyAttention is the whole mechanism in forward(); attnmt asks it one decoding step at a time.
MyAttentionAllSteps below is the same mechanism in the faster form that answers all steps at once.
"""

import math

import torch
from torch import nn

from attnmt.attention import Attention


class MyAttention(nn.Module):
    def __init__(self, query_dim, key_dim, value_dim, attention_dim=256):
        super().__init__()
        self.query_projection = nn.Linear(query_dim, attention_dim)
        self.key_projection = nn.Linear(key_dim, attention_dim)
        self.scale = 1.0 / math.sqrt(attention_dim)

    def forward(self, query, keys, values, mask):
        # query [B, Dq], keys [B, S, Dk], values [B, S, Dv], mask [B, S] (True = may attend)
        q = self.query_projection(query)  # [B, A]
        k = self.key_projection(keys)  # [B, S, A]
        scores = torch.einsum("ba,bsa->bs", q, k) * self.scale  # [B, S]
        has_any = mask.any(dim=-1, keepdim=True)  # [B, 1]: a row with no real position attends to nothing
        scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~has_any, 0.0)
        weights = torch.softmax(scores, dim=-1) * mask  # [B, S], exactly 0 where mask is False
        context = torch.einsum("bs,bsv->bv", weights, values)  # [B, Dv]
        return context, weights


class MyAttentionAllSteps(Attention):
    """The same mechanism in the speed form the built-ins use: the keys are projected once per
    sentence (prepare_keys), and score() answers all decoding steps at once, query [B, T, Dq] ->
    scores [B, T, S]. attnmt does the masking, the softmax and the weighted sum."""

    def __init__(self, query_dim, key_dim, value_dim, attention_dim=256):
        super().__init__(query_dim, key_dim, value_dim)
        self.query_projection = nn.Linear(query_dim, attention_dim)
        self.key_projection = nn.Linear(key_dim, attention_dim)
        self.scale = 1.0 / math.sqrt(attention_dim)

    def prepare_keys(self, keys):  # [B, S, Dk] -> [B, S, A], once per sentence
        return self.key_projection(keys)

    def score(self, query, prepared):  # query [B, T, Dq] -> scores [B, T, S]
        q = self.query_projection(query) * self.scale
        return torch.bmm(q, prepared.keys.transpose(1, 2))
