"""The decoder's key/value cache for incremental decoding (paper section 3.2.3: the decoder attends to the
positions before it, so each step computes only the newest position and reads the earlier ones from here).

Legend: B batch (sentences), S source length, H heads, Dh head dim, K beams per sentence, N = B*K rows,
t positions decoded so far.

`init_cache(model, ...)` starts one from the decoder layers' `memory_kv`; it is passed to
`Transformer.decode_step`, never stored on a module (the decoding interface: `init_cache`, `decode_step`,
`rerank_beams`, `keep_sentences`). The model's files do not import this one.
"""

from __future__ import annotations

import torch

from transformer.model.attention import attention_bias


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


def init_cache(model, memory: torch.Tensor, src_mask: torch.Tensor, *, beams: int, capacity: int) -> DecoderCache:
    """The cache for decoding with `model` (a `Transformer`): each decoder layer's cross-attention keys and values of
    memory (B, S, D), once per sentence; self-attention room for `capacity` target positions of N = B*beams rows
    (more are allocated if decoding runs longer)."""
    layers = [LayerCache(*layer.memory_kv(memory), slots=beams, capacity=capacity) for layer in model.decoder.layers]
    return DecoderCache(layers, src_mask, beams=beams)
