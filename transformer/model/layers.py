"""The feed-forward sub-layer and the encoder and decoder layers (paper sections 3.1 and 3.3).

Legend: B batch, S source length, T target length, D d_model, F d_ff, H heads, Dh head dim, N = B*K rows.

Each sub-layer is wrapped as in section 5.4: dropout on its output, then the residual add. Post-LN (the paper,
`norm_first=False`) normalises after the add, LayerNorm(x + Dropout(Sublayer(x))); pre-LN normalises the
sub-layer's input instead, x + Dropout(Sublayer(LayerNorm(x))), and the stack then ends in a final LayerNorm.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from transformer.model.attention import AttentionWeights, MultiHeadAttention, step_attention

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position alike (section 3.3)."""

    def __init__(self, *, d_model: int, d_ff: int, activation: str, activation_dropout: float) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.activation = ACTIVATIONS[activation]
        self.dropout = nn.Dropout(activation_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D)."""
        return self.linear2(self.dropout(self.activation(self.linear1(x))))  # via (B, T, F)


class _SublayerConnection(nn.Module):
    """Base of both layers: their sub-layers, and the dropout, residual add and LayerNorm around each of them.

    Builds self-attention, then (in the decoder, `cross_attention = True`) attention over the encoder memory, then
    the feed-forward network, each with its LayerNorm: the state-dict keys and the initialisation order.
    """

    cross_attention = False

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float,
        attention_dropout: float,
        activation_dropout: float,
        activation: str,
        norm_first: bool,
        eps: float,
    ) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first
        attention = dict(d_model=d_model, n_heads=n_heads, attention_dropout=attention_dropout)
        self.self_attn = MultiHeadAttention(**attention, self_attention=True)
        self.self_attn_norm = nn.LayerNorm(d_model, eps=eps)
        if self.cross_attention:
            self.cross_attn = MultiHeadAttention(**attention, self_attention=False)
            self.cross_attn_norm = nn.LayerNorm(d_model, eps=eps)
        self.ff = PositionwiseFeedForward(
            d_model=d_model, d_ff=d_ff, activation=activation, activation_dropout=activation_dropout
        )
        self.ff_norm = nn.LayerNorm(d_model, eps=eps)

    def residual(
        self, x: torch.Tensor, norm: nn.LayerNorm, sublayer: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        """Post-LN: LayerNorm(x + Dropout(Sublayer(x))). Pre-LN: x + Dropout(Sublayer(LayerNorm(x)))."""
        if self.norm_first:
            return x + self.dropout(sublayer(norm(x)))
        return norm(x + self.dropout(sublayer(x)))


class EncoderLayer(_SublayerConnection):
    """Self-attention, then the feed-forward network, each in a residual block."""

    def forward(
        self, x: torch.Tensor, src_mask: torch.Tensor, attention: AttentionWeights | None = None
    ) -> torch.Tensor:
        """x (B, S, D), src_mask (B, 1, 1, S) -> (B, S, D); appends its self-attention weights to `attention`."""
        weights = None if attention is None else attention.encoder
        x = self.residual(x, self.self_attn_norm, lambda h: self.self_attn(h, mask=src_mask, weights=weights))
        return self.residual(x, self.ff_norm, self.ff)


class DecoderLayer(_SublayerConnection):
    """Masked self-attention, attention over the encoder memory, then the feed-forward network."""

    cross_attention = True

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor, attention: AttentionWeights | None = None
    ) -> torch.Tensor:
        """Teacher forcing: x (B, T, D), memory (B, S, D), src_mask (B, 1, 1, S) -> (B, T, D).

        Target padding needs no mask: it sits after the real tokens, which the causal mask already hides it
        from, and the loss ignores the padded positions themselves. `attention`: appends its self- and
        cross-attention weights there.
        """
        own, cross = (None, None) if attention is None else (attention.decoder, attention.cross)
        x = self.residual(x, self.self_attn_norm, lambda h: self.self_attn(h, is_causal=True, weights=own))
        x = self.residual(x, self.cross_attn_norm, lambda h: self.cross_attn(h, memory, mask=src_mask, weights=cross))
        return self.residual(x, self.ff_norm, self.ff)

    def memory_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The cross-attention's keys and values of memory (B, S, D): (B, H, S, Dh) each, computed once per
        sentence for incremental decoding."""
        cross_k, cross_v = self.cross_attn.project_kv(memory)
        return cross_k.contiguous(), cross_v.contiguous()

    def step(self, x: torch.Tensor, cache, memory_bias: torch.Tensor, self_bias: torch.Tensor | None) -> torch.Tensor:
        """One new position: x (N, 1, D) attends to the cached prefix and the memory -> (N, 1, D).

        cache: this layer's keys and values so far (`LayerCache`, model/cache.py): `append` adds this position's
        and returns all of them; `cross_k` and `cross_v` are `memory_kv`'s.

        N = B*K rows, a sentence's K rows consecutive. Biases (`attention_bias`, one per head): memory_bias
        (B, H, 1, S) for the source padding; self_bias (B, H, K, (t+1)*slots) or None, the cached slots each row
        may attend (`DecoderCache.self_attention_bias`). A sentence's K rows query together, its cache and its
        memory alike.
        """
        N, _, D = x.shape
        B = memory_bias.size(0)

        def self_attention(h: torch.Tensor) -> torch.Tensor:
            qkv = self.self_attn.project_qkv(h.view(B, N // B, D))  # (3, B, H, K, Dh)
            keys, values = cache.append(qkv[1:])  # (B, H, (t+1)*slots, Dh) each: the prefix is never recomputed
            heads = step_attention(qkv[0], keys, values, self_bias)  # (B, H, K, Dh)
            return self.self_attn.merge_heads(heads).view(N, 1, D)

        def cross_attention(h: torch.Tensor) -> torch.Tensor:
            q = self.cross_attn.project_q(h.view(B, N // B, D))  # (B, H, K, Dh)
            heads = step_attention(q, cache.cross_k, cache.cross_v, memory_bias)  # (B, H, K, Dh)
            return self.cross_attn.merge_heads(heads).view(N, 1, D)

        x = self.residual(x, self.self_attn_norm, self_attention)
        x = self.residual(x, self.cross_attn_norm, cross_attention)
        return self.residual(x, self.ff_norm, self.ff)
