"""Multi-head attention (paper section 3.2), the masks it reads, and the decoder's key/value cache.

Legend: B batch, S source length, T target length, D d_model, H heads, Dh head dim (D / H), N = B*K rows.

Masks are boolean and True means "may attend", as `F.scaled_dot_product_attention` reads them; only
`make_pad_mask` and `make_causal_mask` build them. Decoding adds them to the scores instead, as biases
(`attention_bias`: 0 where a query may attend, -inf where not).
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

    def project_qkv(self, x: torch.Tensor) -> torch.Tensor:
        """Self-attention projections: (B, T, D) -> (3, B, H, T, Dh), the queries, keys and values (one view)."""
        B, T, _ = x.shape
        qkv = linear(self.qkv_proj, x).view(B, T, 3, self.n_heads, self.d_head)  # (B, T, 3, H, Dh)
        return qkv.permute(2, 0, 3, 1, 4)  # (3, B, H, T, Dh)

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
            q, k, v = self.project_qkv(x).unbind(0)
        else:
            q, (k, v) = self.project_q(x), self.project_kv(memory)
        return self.attend(q, k, v, mask, is_causal)


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


class LayerCache:
    """One decoder layer's keys and values during incremental decoding.

    Self-attention: per sentence and position, one slot per beam (K of them; `slots`): at step t, the sentence's
    row k writes its key and value into slot k of position t, and nothing moves afterwards. Re-ranking beams leaves
    the buffer alone; each row reads its own history through the bias of `DecoderCache.self_attention_bias`, so a
    sentence's K rows query all K*t cached slots together, in one matrix product, as they query its memory. The
    buffer is allocated once for `capacity` positions (doubled if a step needs more). Cross-attention: keys and
    values of the encoder memory, once per sentence.
    """

    def __init__(self, cross_k: torch.Tensor, cross_v: torch.Tensor, *, slots: int, capacity: int) -> None:
        B, H, S, Dh = cross_k.shape
        self.cross_k, self.cross_v = cross_k, cross_v  # (B, H, S, Dh) each
        self.buffer = cross_k.new_empty(2, B, H, max(capacity, 1), slots, Dh)  # (2, B, H, T_max, K, Dh): keys, values
        self.sentences = B  # sentences in use: buffer[:, :B]
        self.length = 0  # positions in use: t

    @property
    def slots(self) -> int:
        return self.buffer.size(4)

    def used(self) -> torch.Tensor:
        """Keys and values of positions 0..t-1, slot by slot: (2, B, H, t*K, Dh), a view."""
        return self.buffer[:, : self.sentences].flatten(3, 4)[:, :, :, : self.length * self.slots]

    @property
    def keys(self) -> torch.Tensor:
        return self.used()[0]

    def append(self, kv: torch.Tensor) -> torch.Tensor:
        """Write keys and values kv (2, B, H, K', Dh), row k' of each sentence into slot k' of position t, in one
        copy; returns the keys and values of positions 0..t (2, B, H, (t+1)*K, Dh)."""
        if self.length == self.buffer.size(3):
            self.resize(positions=2 * self.length, slots=self.slots)
        beams = kv.size(3)
        self.buffer[:, : self.sentences, :, self.length, :beams] = kv
        if beams < self.slots:  # slots no row owns: never attended, but their weight (0) multiplies them
            self.buffer[:, : self.sentences, :, self.length, beams:] = 0
        self.length += 1
        return self.used()

    def resize(self, *, positions: int, slots: int) -> None:
        """Room for `positions` positions of `slots` slots; the used positions are copied, their new slots zeros."""
        old = self.buffer[:, : self.sentences, :, : self.length]  # (2, B, H, t, K, Dh)
        self.buffer = old.new_empty(*old.shape[:3], positions, slots, old.size(5))
        self.buffer[:, :, :, : self.length, : old.size(4)] = old
        self.buffer[:, :, :, : self.length, old.size(4) :] = 0

    def keep_sentences(self, sentences: torch.Tensor, spare: torch.Tensor) -> torch.Tensor:
        """Sentence i takes sentence `sentences[i]` (B',); returns the next layer's spare buffer.

        When every sentence that moves comes from past the first B' (done sentences' places filled by the last
        ones, as beam search drops them), only those move, in place. Otherwise all are copied into `spare` (the
        used positions only), which then becomes this layer's buffer, and the old buffer is returned as the next
        spare; a spare too small (more sentences, or the cache grew) is replaced by a new one.
        """
        index = sentences.tolist()
        moves = [(i, j) for i, j in enumerate(index) if i != j]
        used = self.length * self.slots * self.buffer.size(5)  # a head's positions 0..t-1: its first t*K*Dh numbers
        if all(j >= len(index) for _, j in moves):
            if moves:
                to, source = (torch.tensor(side, device=sentences.device) for side in zip(*moves))
                flat = self.buffer.flatten(3)  # (2, B_max, H, T_max*K*Dh)
                flat[:, to, :, :used] = flat[:, source, :, :used]
                for cross in (self.cross_k, self.cross_v):
                    cross[to] = cross[source]
            self.sentences = len(index)
            self.cross_k, self.cross_v = self.cross_k[: len(index)], self.cross_v[: len(index)]
            return spare
        if spare.shape[2:] != self.buffer.shape[2:] or spare.size(1) < sentences.numel():
            spare = self.buffer.new_empty(2, max(sentences.numel(), self.buffer.size(1)), *self.buffer.shape[2:])
        source = self.buffer.flatten(3)[:, : self.sentences, :, :used]  # (2, B, H, t*K*Dh): one piece per head
        torch.index_select(source, 1, sentences, out=spare.flatten(3)[:, : sentences.numel(), :, :used])
        old, self.buffer, self.sentences = self.buffer, spare, sentences.numel()
        self.cross_k = self.cross_k.index_select(0, sentences)
        self.cross_v = self.cross_v.index_select(0, sentences)
        return old


class DecoderCache:
    """Everything incremental decoding needs between steps; passed to `Transformer.decode_step`, never stored.

    Rows: N = B*K, the K beams (`beams`) of sentence b in rows b*K .. b*K+K-1. `history` (N, T_max*slots) holds
    the attention bias of each row over the cached slots (see LayerCache), position p's slots in columns
    p*slots .. p*slots+slots-1: 0 at the slot with the row's own history there, -inf at the others. Re-ranking
    beams re-orders these rows and moves no key or value; each step writes one position's columns. Dropping
    sentences moves the last ones into the places of those that leave, in place (`LayerCache.keep_sentences`).
    """

    def __init__(self, layers: list[LayerCache], src_mask: torch.Tensor, *, beams: int) -> None:
        self.layers = layers
        self.src_mask = src_mask  # (B, 1, 1, S) bool, one per sentence
        dtype = layers[0].cross_k.dtype if layers else torch.float32
        self.heads = layers[0].cross_k.size(1) if layers else 1  # H: the biases are expanded over them once
        B, _, _, S = src_mask.shape
        self.memory_bias = attention_bias(src_mask, dtype).expand(B, self.heads, 1, S).contiguous()  # (B, H, 1, S)
        self.beams = beams  # K rows per sentence
        self.slots = beams  # cache slots per sentence and position: the most rows a sentence has had
        self.position = 0  # index of the next target position
        capacity = layers[0].buffer.size(3) if layers else 1
        self.history = torch.zeros(B * beams, capacity * beams, dtype=dtype, device=src_mask.device)  # (N, T_max*K)
        self._spare = torch.empty(0)
        self._own = torch.empty(0)

    def self_attention_bias(self) -> torch.Tensor | None:
        """Before a step: position t gets each row's own slot; -> the bias of the slots each row attends at
        positions 0..t, for every head, (B, H, K, (t+1)*slots), or None when a sentence has one slot (its own)."""
        if self.slots == 1:
            return None
        N, K, t = self.history.size(0), self.beams, self.position
        if (t + 1) * self.slots > self.history.size(1):
            self.history = torch.cat([self.history, torch.empty_like(self.history)], dim=1)  # room for 2x positions
        if self._own.shape != (K, self.slots):  # row b*K + k writes slot k: 0 there, -inf at the other slots
            eye = torch.eye(K, self.slots, dtype=torch.bool, device=self.history.device)
            self._own = attention_bias(eye, self.history.dtype)  # (K, slots)
        self.history.view(N // K, K, -1, self.slots)[:, :, t] = self._own
        bias = self.history[:, : (t + 1) * self.slots].view(N // K, 1, K, -1)  # (B, 1, K, (t+1)*slots)
        return bias.expand(-1, self.heads, -1, -1).contiguous()  # (B, H, K, (t+1)*slots)

    def rerank_beams(self, rows: torch.Tensor) -> None:
        """Beams re-ranked within their sentences: row i takes row `rows[i]` (B*K',) of the same sentence; K' may
        differ from K (beam search's first step turns one row per sentence into K).

        Only the rows of `history` move; the keys and values, the source mask and the memory stay where they are.
        """
        beams = rows.numel() // max(self.src_mask.size(0), 1)
        if beams > self.slots:
            for layer in self.layers:
                layer.resize(positions=layer.buffer.size(3), slots=beams)
            N = self.history.size(0)
            old = self.history.view(N, -1, self.slots)  # (N, T_max, slots); new slots hidden (-inf)
            new = old.new_full((N, old.size(1), beams - self.slots), float("-inf"))
            self.history = torch.cat([old, new], dim=2).view(N, -1)  # (N, T_max*beams)
            self.slots = beams
        self.history = self.history.index_select(0, rows)
        self.beams = beams

    def keep_sentences(self, sentences: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        """Keep sentences `sentences` (B',), finished ones dropped or (with one row each) repeated; `rows`
        (B'*K,) the rows they keep, re-ranked at once (default: each kept sentence's rows in order)."""
        if rows is None:
            offsets = torch.arange(self.beams, device=sentences.device)  # (K,)
            rows = (sentences[:, None] * self.beams + offsets).view(-1)  # (B'*K,)
        for layer in self.layers:
            self._spare = layer.keep_sentences(sentences, self._spare)
        self.src_mask = self.src_mask.index_select(0, sentences)
        self.memory_bias = self.memory_bias.index_select(0, sentences)
        self.rerank_beams(rows)
