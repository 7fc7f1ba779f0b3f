"""Multi-head attention (paper section 3.2), the masks it reads, and the decoder's key/value cache.

Legend: B batch, S source length, T target length, D d_model, H heads, Dh head dim (D / H), N = B*K rows.

Masks are boolean and True means "may attend", as `F.scaled_dot_product_attention` reads them; only
`make_pad_mask` and `make_causal_mask` build them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from transformer.cpu_linear import linear


def make_pad_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, S) token ids -> (B, 1, 1, S) bool, True at real tokens: every query may attend to every non-pad key."""
    return (tokens != pad_id)[:, None, None, :]


def make_causal_mask(length: int, device: torch.device | None = None) -> torch.Tensor:
    """(T, T) bool, True on and below the diagonal: position i may attend to positions j <= i."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


def avoid_cudnn_attention() -> None:
    """Keep `F.scaled_dot_product_attention` on CUDA off cuDNN's kernel (flash / memory-efficient kernels instead).

    cuDNN's attention builds an execution plan for every new shape, tens of milliseconds each on an H100. Training
    batches vary in length and incremental decoding grows the key length each step, so nearly every call paid it:
    303 ms per base-model update instead of 76 (H100, docs/benchmarks.md).
    """
    if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
        torch.backends.cuda.enable_cudnn_sdp(False)


def reference_attention(q, k, v, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V written out, for tests only (the model: SDPA, or `step_attention` decoding)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


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

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-attention projections: (B, T, D) -> three (B, H, T, Dh)."""
        q, k, v = linear(self.qkv_proj, x).chunk(3, dim=-1)  # 3 x (B, T, D)
        return self._split_heads(q), self._split_heads(k), self._split_heads(v)

    def project_q(self, x: torch.Tensor) -> torch.Tensor:
        """Cross-attention queries: (B, T, D) -> (B, H, T, Dh)."""
        return self._split_heads(linear(self.q_proj, x))

    def project_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys and values from the encoder memory: (B, S, D) -> two (B, H, S, Dh)."""
        k, v = linear(self.kv_proj, memory).chunk(2, dim=-1)  # 2 x (B, S, D)
        return self._split_heads(k), self._split_heads(v)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """Scaled dot-product attention over heads, then W^O: (B, H, T, Dh) x (B, H, S, Dh) -> (B, T, D).

        `mask` is bool and broadcasts to (B, H, T, S); `is_causal` applies the look-ahead mask instead.
        """
        dropout_p = self.attention_dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal)
        return self.merge_heads(out)

    def merge_heads(self, heads: torch.Tensor) -> torch.Tensor:
        """Concat(head_1, ..., head_h) W^O: (B, H, T, Dh) -> (B, T, D)."""
        B, H, T, Dh = heads.shape
        return linear(self.out_proj, heads.transpose(1, 2).reshape(B, T, H * Dh))  # (B, T, D)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """Full-sequence attention. Self: x (B, T, D). Cross: x (B, T, D) attends to memory (B, S, D)."""
        if self.self_attention:
            q, k, v = self.project_qkv(x)
        else:
            q, (k, v) = self.project_q(x), self.project_kv(memory)
        return self.attend(q, k, v, mask, is_causal)


def step_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None):
    """softmax(Q K^T / sqrt(d_k)) V for the few queries of one decoding step, as two batched matrix products.

    q (B, H, Q, Dh); k, v (B, H, t, Dh), which may be views into a preallocated cache (any stride between rows
    and heads, Dh contiguous); mask bool, broadcasting to (B, H, Q, t), True = may attend. -> (B, H, Q, Dh).
    Decoding only (no dropout). `F.scaled_dot_product_attention`'s CPU kernel takes several times longer for one
    query per row than these two products (docs/benchmarks.md).
    """
    B, H, Q, Dh = q.shape
    t = k.size(2)
    scores = torch.bmm(q.reshape(B * H, Q, Dh), k.reshape(B * H, t, Dh).transpose(1, 2))  # (B*H, Q, t)
    scores = scores.view(B, H, Q, t) / math.sqrt(Dh)  # (B, H, Q, t)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1).to(v.dtype).view(B * H, Q, t)  # (B*H, Q, t)
    return torch.bmm(weights, v.reshape(B * H, t, Dh)).view(B, H, Q, Dh)  # (B, H, Q, Dh)


class LayerCache:
    """One decoder layer's keys and values during incremental decoding.

    Self-attention: keys and values of the t positions decoded so far, per row, in a buffer allocated once for
    `capacity` positions (doubled if a step needs more): a step writes its position in place, with no copy of the
    prefix. Cross-attention: keys and values of the encoder memory, once per sentence; the rows of a sentence (its
    beams) share them.
    """

    def __init__(self, cross_k: torch.Tensor, cross_v: torch.Tensor, *, rows: int, capacity: int) -> None:
        B, H, S, Dh = cross_k.shape
        self.cross_k, self.cross_v = cross_k, cross_v  # (B, H, S, Dh) each
        self.buffer = cross_k.new_empty(2, rows, H, max(capacity, 1), Dh)  # (2, N, H, T_max, Dh): keys, values
        self.rows = rows  # rows in use: buffer[:, :rows]
        self.length = 0  # positions in use: t

    @property
    def self_k(self) -> torch.Tensor:
        """(N, H, t, Dh), a view."""
        return self.buffer[0, : self.rows, :, : self.length]

    @property
    def self_v(self) -> torch.Tensor:
        """(N, H, t, Dh), a view."""
        return self.buffer[1, : self.rows, :, : self.length]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (N, H, 1, Dh) at position t; returns the keys and values of positions 0..t (N, H, t+1, Dh)."""
        if self.length == self.buffer.size(3):
            grown = self.buffer.new_empty(*self.buffer.shape[:3], 2 * self.length, self.buffer.size(4))
            grown[:, :, :, : self.length] = self.buffer
            self.buffer = grown
        self.buffer[0, : self.rows, :, self.length] = k[:, :, 0]
        self.buffer[1, : self.rows, :, self.length] = v[:, :, 0]
        self.length += 1
        return self.self_k, self.self_v

    def gather_rows(self, rows: torch.Tensor, spare: torch.Tensor) -> torch.Tensor:
        """Row i takes row `rows[i]` (N',): copied into `spare` (the used positions only), which then becomes this
        layer's buffer; returns the old buffer, the next layer's spare. A spare too small (more rows, or the cache
        grew) is replaced by a new one; otherwise nothing is allocated."""
        if spare.shape[2:] != self.buffer.shape[2:] or spare.size(1) < rows.numel():
            spare = self.buffer.new_empty(2, max(rows.numel(), self.buffer.size(1)), *self.buffer.shape[2:])
        used = self.length * self.buffer.size(4)  # a head's positions 0..t-1: the first t*Dh numbers of its block
        source = self.buffer.flatten(3)[:, : self.rows, :, :used]  # (2, N, H, t*Dh): one piece per head to copy
        torch.index_select(source, 1, rows, out=spare.flatten(3)[:, : rows.numel(), :, :used])
        old, self.buffer, self.rows = self.buffer, spare, rows.numel()
        return old


class DecoderCache:
    """Everything incremental decoding needs between steps; passed to `Transformer.decode_step`, never stored.

    Rows: N = B*K, the K beams (`beams`) of sentence b in rows b*K .. b*K+K-1. Moving rows copies only the
    self-attention keys and values of the positions decoded so far, into a spare buffer that then swaps in.
    """

    def __init__(self, layers: list[LayerCache], src_mask: torch.Tensor, *, beams: int) -> None:
        self.layers = layers
        self.src_mask = src_mask  # (B, 1, 1, S) bool, one per sentence
        self.beams = beams  # K rows per sentence
        self.position = 0  # index of the next target position
        self._spare = torch.empty(0)

    def rerank_beams(self, rows: torch.Tensor) -> None:
        """Beams re-ranked within their sentences: row i takes row `rows[i]` (B*K',) of the same sentence; K' may
        differ from K (beam search's first step turns one row per sentence into K).

        The cross-attention keys and values and the source mask belong to the sentence and stay where they are.
        """
        for layer in self.layers:
            self._spare = layer.gather_rows(rows, self._spare)
        self.beams = rows.numel() // max(self.src_mask.size(0), 1)

    def keep_sentences(self, sentences: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        """Keep sentences `sentences` (B',), finished ones dropped or (with one row each) repeated; `rows`
        (B'*K,) the rows they keep, re-ranked in the same copy (default: each kept sentence's rows in order)."""
        if rows is None:
            offsets = torch.arange(self.beams, device=sentences.device)  # (K,)
            rows = (sentences[:, None] * self.beams + offsets).view(-1)  # (B'*K,)
        for layer in self.layers:
            self._spare = layer.gather_rows(rows, self._spare)
            layer.cross_k = layer.cross_k.index_select(0, sentences)
            layer.cross_v = layer.cross_v.index_select(0, sentences)
        self.src_mask = self.src_mask.index_select(0, sentences)
        self.beams = rows.numel() // max(sentences.numel(), 1)
