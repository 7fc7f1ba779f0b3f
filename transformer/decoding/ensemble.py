"""Ensembles: several models decoding together behind the decoding interface of one (model/transformer.py), so
greedy decoding, beam search and sampling (search.py) run over them unchanged.

Legend: B batch (sentences), S source length, V vocabulary, M models, N = B*K rows.

At every step each model gives its next-token distribution over the one shared vocabulary, and the ensemble's is
their mean in probabilities: log p(y) = log (1/M) sum_m p_m(y), as fairseq's and OpenNMT-py's ensembles average
(not the mean of the log-probabilities, a product of experts). Each model keeps its own encoder memory and cache;
the ensemble's cache re-ranks and drops rows in all of them at once. Teacher-forced scoring averages the same way,
per target token (scoring.py): the probability of a target under the ensemble is the product over its tokens of
the models' mean probabilities, the score beam search gives it.

Decisions:
- Checkpoints join an ensemble only with the same SentencePiece model(s) (the tokenizer bytes stored in each):
  otherwise their ids mean different pieces. Model sizes may differ. The ensemble decodes with the first
  checkpoint's config (decoding settings, languages); `max_positions` is the smallest of the models'.
- One checkpoint gives the plain model, not an ensemble of one (which decodes exactly as it does; a test checks).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from transformer.errors import UserError
from transformer.model.cache import init_cache


def mean_log_probs(log_probs: Sequence[torch.Tensor]) -> torch.Tensor:
    """M tensors of log-probabilities, one shape -> the log of their mean probability, that shape.

    Computed as m + log(mean(exp(lp - m))) with m the elementwise maximum over the models, so M equal inputs give
    back the input exactly (exp(0) = 1, a mean of ones is 1, log 1 = 0) and a log-probability of -inf in every
    model stays -inf.
    """
    if len(log_probs) == 1:
        return log_probs[0]
    stacked = torch.stack(list(log_probs))  # (M, ...)
    top = stacked.amax(dim=0)  # (...)
    top = top.masked_fill(top == float("-inf"), 0.0)  # every model -inf: exp(-inf - 0) = 0, log 0 = -inf
    return top + (stacked - top).exp().mean(dim=0).log()


class EnsembleCache:
    """One cache per model, moved together: `rerank_beams` and `keep_sentences` as `model.cache.DecoderCache`."""

    def __init__(self, caches: list) -> None:
        self.caches = caches

    def rerank_beams(self, rows: torch.Tensor) -> None:
        for cache in self.caches:
            cache.rerank_beams(rows)

    def keep_sentences(self, sentences: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        for cache in self.caches:
            cache.keep_sentences(sentences, rows)


class Ensemble(nn.Module):
    """Models over one vocabulary, decoding together: the decoding interface of one model (see the module
    docstring). An `nn.Module`, so `.to(device)`, `.eval()` and the CPU copies of cpu_linear.py reach every model."""

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        if not models:
            raise ValueError("an ensemble needs at least one model")
        pads = {model.pad_id for model in models}
        if len(pads) > 1:
            raise ValueError(f"the models' pad ids differ ({sorted(pads)}); an ensemble needs one vocabulary")
        self.models = nn.ModuleList(models)
        self.pad_id = models[0].pad_id
        self.max_positions = min(model.max_positions for model in models)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> list[torch.Tensor]:
        """src (B, S) ids, src_mask (B, 1, 1, S) bool -> each model's memory (B, S, D_m)."""
        return [model.encode(src, src_mask) for model in self.models]

    def init_cache(self, memory: list[torch.Tensor], src_mask: torch.Tensor, *, beams: int, capacity: int):
        """Each model's cache from its memory (model/cache.py's `init_cache`), as one `EnsembleCache`."""
        return EnsembleCache(
            [init_cache(model, m, src_mask, beams=beams, capacity=capacity) for model, m in zip(self.models, memory)]
        )

    def decode_step(self, tokens: torch.Tensor, cache: EnsembleCache) -> torch.Tensor:
        """tokens (N, 1) -> (N, V) float32: the log of the models' mean next-token probability; grows every cache."""
        return mean_log_probs([model.decode_step(tokens, c) for model, c in zip(self.models, cache.caches)])


def members(model: nn.Module) -> list[nn.Module]:
    """The models behind `model`: an ensemble's, or the model itself."""
    return list(model.models) if isinstance(model, Ensemble) else [model]


def load_models(paths: Sequence[str | Path], device: str | torch.device = "cpu"):
    """(model, tokenizer, config) from one checkpoint, or an `Ensemble` of several over one tokenizer (the first
    checkpoint's tokenizer and config); a checkpoint with another tokenizer is a `UserError` naming both files."""
    from transformer.checkpoint import build_model, load_checkpoint

    paths = [Path(p) for p in paths]
    if not paths:
        raise UserError("no checkpoint given: pass one, or several for an ensemble")
    loaded, first = [], None
    for path in paths:
        state = load_checkpoint(path)
        here = (path, state["tokenizer"], state.get("vocab"))
        if first is not None:
            _check_same_tokenizer(first, here)
        first = first or here
        loaded.append(build_model(state, device))
        del state
    (model, tokenizer, config), models = loaded[0], [m for m, _, _ in loaded]
    return (model if len(models) == 1 else Ensemble(models).to(device).eval()), tokenizer, config


def _check_same_tokenizer(first: tuple, other: tuple) -> None:
    """(path, tokenizer bytes, vocabulary sizes) of two checkpoints: a `UserError` unless they are the same."""
    (path_a, tok_a, vocab_a), (path_b, tok_b, vocab_b) = first, other
    if vocab_a != vocab_b:
        sizes = [f"{v.get('src')}/{v.get('tgt')}" if v else "unknown" for v in (vocab_a, vocab_b)]
        raise UserError(
            f"{path_a} and {path_b} have different vocabularies ({sizes[0]} and {sizes[1]} source/target entries); "
            "an ensemble needs checkpoints trained with one tokenizer"
        )
    if tok_a != tok_b:
        raise UserError(
            f"{path_a} and {path_b} have different SentencePiece models (the same sizes, other pieces); an ensemble "
            "needs checkpoints trained with one tokenizer"
        )
