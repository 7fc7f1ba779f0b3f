"""Multi-head attention (paper section 3.2), the masks it reads, and the decoder's key/value cache.

Legend: B batch, S source length, T target length, D d_model, H heads, Dh head dim (D / H), N = B*K rows.

Masks are boolean and True means "may attend", as `F.scaled_dot_product_attention` reads them; only
`make_pad_mask` and `make_causal_mask` build them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from transformer.onednn import linear


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
    """softmax(Q K^T / sqrt(d_k)) V written out, for tests only (the model uses the fused kernel)."""
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
        B, H, T, Dh = out.shape
        out = out.transpose(1, 2).reshape(B, T, H * Dh)  # (B, T, D)
        return linear(self.out_proj, out)

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


@dataclass
class LayerCache:
    """One decoder layer's keys and values: self-attention grows by one position per step, cross is fixed."""

    self_k: torch.Tensor  # (N, H, t, Dh), t = tokens decoded so far
    self_v: torch.Tensor  # (N, H, t, Dh)
    cross_k: torch.Tensor  # (N, H, S, Dh), computed once from the encoder memory
    cross_v: torch.Tensor  # (N, H, S, Dh)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K_cache <- concat(K_cache, k_new); returns the whole keys and values (N, H, t+1, Dh)."""
        self.self_k = torch.cat([self.self_k, k], dim=2)
        self.self_v = torch.cat([self.self_v, v], dim=2)
        return self.self_k, self.self_v


@dataclass
class DecoderCache:
    """Everything incremental decoding needs between steps; passed to `Transformer.decode_step`, never stored."""

    layers: list[LayerCache]
    src_mask: torch.Tensor  # (N, 1, 1, S) bool
    position: int = 0  # index of the next target position

    def keep_rows(self, index: torch.Tensor) -> None:
        """Keep rows `index` (N',) of every tensor: sentences expanded to K beams, or finished sentences dropped."""
        self.rerank_beams(index)
        for layer in self.layers:
            layer.cross_k = layer.cross_k.index_select(0, index)
            layer.cross_v = layer.cross_v.index_select(0, index)
        self.src_mask = self.src_mask.index_select(0, index)

    def rerank_beams(self, index: torch.Tensor) -> None:
        """Beams re-ranked within their sentences: row i takes row `index[i]` (N,) of the same sentence.

        Only the self-attention keys and values move: the cross-attention keys and values and the source mask of
        the rows of one sentence are already equal, so this saves copying (N, H, S, Dh) twice per layer per step.
        """
        for layer in self.layers:
            layer.self_k = layer.self_k.index_select(0, index)
            layer.self_v = layer.self_v.index_select(0, index)
