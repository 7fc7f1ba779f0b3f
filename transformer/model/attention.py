"""Multi-head attention (paper section 3.2), the masks it reads, and one decoding step's attention.

Legend: B batch, S source length, T target length, D d_model, H heads, Dh head dim (D / H), N = B*K rows.

Masks are boolean and True means "may attend", as `F.scaled_dot_product_attention` reads them; only
`make_pad_mask` and `make_causal_mask` build them. Decoding adds them to the scores instead, as biases
(`attention_bias`: 0 where a query may attend, -inf where not).

Attention runs through `F.scaled_dot_product_attention`, which does not return the weights. A caller that needs
them (word alignments, attention maps) passes a list as `weights`: that call then computes softmax(QK^T/sqrt(d_k))
explicitly (`attention_probabilities`), appends it to the list and multiplies it by V. The list belongs to the
caller; nothing is kept on the module.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn


def make_pad_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, S) token ids -> (B, 1, 1, S) bool, True at real tokens: every query may attend to every non-pad key."""
    return (tokens != pad_id)[:, None, None, :]


def make_causal_mask(length: int, device: torch.device | None = None) -> torch.Tensor:
    """(T, T) bool, True on and below the diagonal: position i may attend to positions j <= i."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def reference_attention(q, k, v, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V written out, for tests only (the model: SDPA, or `step_attention` decoding)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


def attention_probabilities(
    q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None, is_causal: bool = False
) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k)) written out: q (B, H, T, Dh), k (B, H, S, Dh) -> (B, H, T, S).

    `mask` is bool and broadcasts to (B, H, T, S); `is_causal` applies the look-ahead mask instead (T = S). Each
    row sums to 1 over the keys it may attend and is 0 elsewhere.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, T, S)
    if is_causal:
        mask = make_causal_mask(q.size(-2), device=q.device)  # (T, T)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1)


class AttentionWeights(NamedTuple):
    """The attention probabilities of one full pass (`Transformer.forward(..., return_attention=True)`), one
    tensor per layer, first layer first, each row summing to 1 over its keys."""

    encoder: list[torch.Tensor]  # encoder self-attention: (B, H, S, S) per encoder layer
    decoder: list[torch.Tensor]  # decoder (masked) self-attention: (B, H, T, T) per decoder layer
    cross: list[torch.Tensor]  # decoder attention over the encoder memory: (B, H, T, S) per decoder layer


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    Self-attention projects Q, K and V with one fused (D -> 3D) matrix `qkv_proj`; cross-attention projects the
    queries with `q_proj` and the encoder memory with a fused (D -> 2D) `kv_proj`.
    """

    def __init__(self, *, d_model: int, n_heads: int, attention_dropout: float, self_attention: bool) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.attention_dropout = attention_dropout
        self.self_attention = self_attention
        if self_attention:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        else:
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = nn.Linear(d_model, 2 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, Dh)

    def project_qkv(self, x: torch.Tensor) -> torch.Tensor:
        """Self-attention projections: (B, T, D) -> (3, B, H, T, Dh), the queries, keys and values (one view)."""
        B, T, _ = x.shape
        qkv = self.qkv_proj(x).view(B, T, 3, self.n_heads, self.d_head)  # (B, T, 3, H, Dh)
        return qkv.permute(2, 0, 3, 1, 4)  # (3, B, H, T, Dh)

    def project_q(self, x: torch.Tensor) -> torch.Tensor:
        """Cross-attention queries: (B, T, D) -> (B, H, T, Dh)."""
        return self._split_heads(self.q_proj(x))

    def project_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys and values from the encoder memory: (B, S, D) -> two (B, H, S, Dh)."""
        k, v = self.kv_proj(memory).chunk(2, dim=-1)  # 2 x (B, S, D)
        return self._split_heads(k), self._split_heads(v)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        weights: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Scaled dot-product attention over heads, then W^O: (B, H, T, Dh) x (B, H, S, Dh) -> (B, T, D).

        `mask` is bool and broadcasts to (B, H, T, S); `is_causal` applies the look-ahead mask instead.
        `weights`: a list, to compute the attention probabilities explicitly and append them, (B, H, T, S), to it
        (the same output as SDPA's, up to rounding); None (the default): SDPA, which does not return them.
        """
        dropout_p = self.attention_dropout if self.training else 0.0
        if weights is None:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal)
        else:
            probabilities = attention_probabilities(q, k, mask, is_causal)  # (B, H, T, S)
            weights.append(probabilities)
            out = F.dropout(probabilities, p=dropout_p) @ v  # (B, H, T, Dh)
        return self.merge_heads(out)

    def merge_heads(self, heads: torch.Tensor) -> torch.Tensor:
        """Concat(head_1, ..., head_h) W^O: (B, H, T, Dh) -> (B, T, D)."""
        B, H, T, Dh = heads.shape
        return self.out_proj(heads.transpose(1, 2).reshape(B, T, H * Dh))  # (B, T, D)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        weights: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Full-sequence attention. Self: x (B, T, D). Cross: x (B, T, D) attends to memory (B, S, D).

        `weights`: see `attend` (a list receives the (B, H, T, S) attention probabilities)."""
        if self.self_attention:
            q, k, v = self.project_qkv(x).unbind(0)
        else:
            q, (k, v) = self.project_q(x), self.project_kv(memory)
        return self.attend(q, k, v, mask, is_causal, weights)


def attention_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask (True = may attend) as an additive bias of the same shape: 0 where True, -inf where False."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def step_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None = None):
    """softmax(Q K^T / sqrt(d_k) + bias) V for the few queries of one decoding step, as two batched matrix products.

    q (B, H, Q, Dh); k, v (B, H, t, Dh), which may be views into a preallocated cache (any stride between rows
    and heads, Dh contiguous); bias (`attention_bias`) broadcasting to (B, H, Q, t), or None. -> (B, H, Q, Dh).
    The scaling and the bias ride in the first product (baddbmm). Decoding only (no dropout).
    `F.scaled_dot_product_attention`'s CPU kernel takes several times longer for so few queries per row than these
    two products (docs/benchmarks.md).
    """
    B, H, Q, Dh = q.shape
    t = k.size(2)
    queries, keys = q.reshape(B * H, Q, Dh), k.reshape(B * H, t, Dh).transpose(1, 2)  # (B*H, Q, Dh), (B*H, Dh, t)
    if bias is None:
        bias = q.new_zeros(1, 1, 1)
    else:
        bias = bias.expand(B, H, -1, t).reshape(B * H, -1, t)  # (B*H, Q or 1, t)
    scores = torch.baddbmm(bias, queries, keys, alpha=1 / math.sqrt(Dh))  # (B*H, Q, t)
    return torch.bmm(scores.softmax(dim=-1), v.reshape(B * H, t, Dh)).view(B, H, Q, Dh)  # (B, H, Q, Dh)
