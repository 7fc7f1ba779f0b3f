"""A decoder key/value cache of fixed shapes, for a decoding step captured once as a CUDA graph and replayed
(decoding/graph_search.py): every tensor is allocated before the first step and written in place, and the position
is a () tensor on the device, so every step runs the same kernels on the same addresses.

Legend: B batch (sentences), S source length, H heads, Dh head dim, K beams per sentence, N = B*K rows,
T positions the cache holds (the longest output of the batch).

It mirrors model/cache.py's `DecoderCache` slot for slot (row k of a sentence writes slot k of each position; a
re-ranking moves only the rows of the attention bias, never a key or value), with three differences:
- the buffers hold all T positions from the start, zeros until written, and each step attends to all of them:
  the positions not written yet are hidden by -inf in the bias (the eager cache attends to positions 0..t), so
  they add exact zeros to the softmax;
- the rows are N = B*K from the first step (the eager search starts from one row per sentence);
- sentences never leave: a finished sentence's rows go on being computed, and the search ignores them
  (`keep_sentences` is refused).
"""

from __future__ import annotations

import torch

from transformer.model.attention import attention_bias


class StaticLayerCache:
    """One decoder layer's keys and values: (2, B, H, T, K, Dh), position p's slot k written by row k at step p."""

    def __init__(self, cross_k: torch.Tensor, cross_v: torch.Tensor, *, beams: int, capacity: int, position) -> None:
        B, H, S, Dh = cross_k.shape
        self.cross_k, self.cross_v = cross_k, cross_v  # (B, H, S, Dh) each
        self.buffer = cross_k.new_zeros(2, B, H, capacity, beams, Dh)  # (2, B, H, T, K, Dh): keys, values
        self.position = position  # () long, shared with the `StaticDecoderCache`

    def append(self, kv: torch.Tensor) -> torch.Tensor:
        """Write kv (2, B, H, K, Dh) into the slots of the current position; returns every slot of every position,
        (2, B, H, T*K, Dh), a view (the unwritten ones are zeros, hidden by the bias)."""
        self.buffer.index_copy_(3, self.position.view(1), kv.unsqueeze(3))
        return self.buffer.flatten(3, 4)


class StaticDecoderCache:
    """What `Transformer.decode_step` reads of a cache (`position`, `layers`, `memory_bias`,
    `self_attention_bias()`), in fixed shapes. `history` (N, T*K) is each row's attention bias over the slots: 0 at
    the slots holding its own history, -inf elsewhere and at every position not written yet."""

    def __init__(self, layers: list[StaticLayerCache], src_mask: torch.Tensor, *, beams: int, position) -> None:
        self.layers = layers
        self.position = position  # () long: the next target position, advanced in place by the decoder
        self.beams = beams
        dtype = layers[0].cross_k.dtype
        B, _, _, S = src_mask.shape
        self.heads = layers[0].cross_k.size(1)
        self.memory_bias = attention_bias(src_mask, dtype).expand(B, self.heads, 1, S).contiguous()  # (B, H, 1, S)
        capacity = layers[0].buffer.size(3)
        self.history = src_mask.new_zeros(B * beams, capacity * beams, dtype=dtype).fill_(float("-inf"))
        eye = torch.eye(beams, dtype=torch.bool, device=src_mask.device)
        self.own = (
            attention_bias(eye, dtype).view(1, beams, 1, beams).expand(B, -1, -1, -1)
        )  # (B, K, 1, K): row k, slot k

    def self_attention_bias(self) -> torch.Tensor:
        """Before a step: the current position's own slot opened for each row; -> (B, H, K, T*K), a view."""
        B, K = self.memory_bias.size(0), self.beams
        self.history.view(B, K, -1, K).index_copy_(2, self.position.view(1), self.own)
        return self.history.view(B, 1, K, -1).expand(-1, self.heads, -1, -1)  # (B, H, K, T*K)

    def restart(self, model, memory: torch.Tensor, src_mask: torch.Tensor) -> None:
        """Start over, in place, for another batch of the same shapes: memory (B, S, D), src_mask (B, 1, 1, S)."""
        for layer_cache, layer in zip(self.layers, model.decoder.layers):
            cross_k, cross_v = layer.memory_kv(memory)
            layer_cache.cross_k.copy_(cross_k)
            layer_cache.cross_v.copy_(cross_v)
            layer_cache.buffer.zero_()
        self.memory_bias.copy_(attention_bias(src_mask, self.memory_bias.dtype).expand_as(self.memory_bias))
        self.history.fill_(float("-inf"))
        self.position.zero_()

    def rerank_beams(self, rows: torch.Tensor) -> None:
        """Row i takes row `rows[i]` (N,) of the same sentence: the rows of `history` move, in place."""
        self.history.copy_(self.history.index_select(0, rows))

    def keep_sentences(self, sentences: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        raise RuntimeError("a static cache keeps every sentence: the graphed search masks finished ones instead")


def init_static_cache(model, memory: torch.Tensor, src_mask: torch.Tensor, *, beams: int, capacity: int):
    """The static cache for decoding `memory` (B, S, D) with `model` (a `Transformer`): K = `beams` rows per
    sentence, room for `capacity` target positions, the position at 0."""
    position = torch.zeros((), dtype=torch.long, device=memory.device)
    layers = [
        StaticLayerCache(*layer.memory_kv(memory), beams=beams, capacity=capacity, position=position)
        for layer in model.decoder.layers
    ]
    return StaticDecoderCache(layers, src_mask, beams=beams, position=position)
