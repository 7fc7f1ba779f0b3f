"""The decoding interface written down: what the search (search.py) needs of a model, of its cache and of the
controls that steer it. An ensemble (ensemble.py), an imported model or a new cache is checked against these
`typing.Protocol`s rather than found by `hasattr`.

Legend: B batch (sentences), S source length, D d_model, V vocabulary, K beams per sentence, N = B*K rows,
t tokens decoded so far.

The search calls, per step: `model.decode_step` once, then `controls.mask` once (controls.py); beam search then
picks its candidates with `select` (the controls' selector, or the plain top 2K), and moves the rows of the cache
and of the controls together with `rerank_beams` / `keep_sentences`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class RowMoves(Protocol):
    """Per-row state that follows the search's rows: the cache (model/cache.py) and every search control."""

    def rerank_beams(self, rows: torch.Tensor) -> None:
        """Row i takes row `rows[i]` (N',) of the same sentence; N' may differ from N (the first beam step)."""

    def keep_sentences(self, sentences: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        """Keep sentences `sentences` (B',) (done ones dropped, or repeated with one row each); `rows` (N',) the
        old rows the kept ones come from (default: each kept sentence's rows in order)."""


@runtime_checkable
class DecodingModel(Protocol):
    """A model the search can decode with: a `Transformer` (model/transformer.py) or an `Ensemble`."""

    pad_id: int
    max_positions: int

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor):
        """src (B, S) long, src_mask (B, 1, 1, S) bool -> the memory (B, S, D), or one per model."""

    def decode_step(self, tokens: torch.Tensor, cache: RowMoves) -> torch.Tensor:
        """tokens (N, 1) the newest token of each row -> (N, V) float log-probabilities; grows the cache."""


@runtime_checkable
class CachingModel(DecodingModel, Protocol):
    """A model that brings its own cache (an `Ensemble`: one cache per member); the search starts any other model's
    from model/cache.py's `init_cache`."""

    def init_cache(self, memory, src_mask: torch.Tensor, *, beams: int, capacity: int) -> RowMoves:
        """memory as `encode` returned it, src_mask (B, 1, 1, S) -> a cache of `beams` rows per sentence, room for
        `capacity` tokens."""


@runtime_checkable
class AttentionModel(DecodingModel, Protocol):
    """One model whose attention weights can be read (alignments, attention maps, <unk> replacement): a
    `Transformer`, with teacher forcing and `forward(..., return_attention=True)`. An ensemble has one attention per
    member, so it is not one."""

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: tgt_in (B, T) ids, memory (B, S, D) -> logits (B, T, V)."""


@runtime_checkable
class SearchControl(RowMoves, Protocol):
    """A control of the search (controls.py, constraints.py): called once per step on every row's next-token
    log-probabilities, and moved with the rows."""

    def mask(self, log_probs: torch.Tensor, tokens: torch.Tensor, step: int) -> torch.Tensor:
        """log_probs (N, V) float, tokens (N, t+1) long the rows' histories (BOS first), step t -> (N, V): -inf at
        the tokens the control forbids (it may write in place)."""


@runtime_checkable
class GraphableControl(SearchControl, Protocol):
    """A control that can run inside a search step captured as a CUDA graph (graph_search.py): it keeps no state
    per row (so it has no moves to make) and forbids with tensor operations of fixed shapes, reading no value on
    the host."""

    def mask_static(self, log_probs: torch.Tensor, tokens: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """log_probs (N, V) float, tokens (N, T+1) long the rows' histories in a fixed buffer (BOS first, columns
        after `step` not written yet), step () long t on the device -> (N, V): the same as `mask` on
        tokens[:, : t + 1] (it may write in place)."""


@runtime_checkable
class CandidateSelector(Protocol):
    """A control that chooses beam search's candidates itself (dynamic beam allocation, constraints.py)."""

    def select(self, log_probs: torch.Tensor, scores: torch.Tensor, k: int):
        """log_probs (B, K, V), scores (B, K) -> values (B, k) candidate scores, where (B, k) long their places in
        log_probs seen as (B*K*V,), priority (B, k) float: the beam's alive hypotheses are the k candidates of
        highest priority that are not EOS, and an EOS among the first K places finishes a hypothesis."""
