"""Scoring given translations: the model's log-probability of each target under teacher forcing, as fairseq's
`--score-reference` and OpenNMT-py's gold scores give it.

Legend: B batch (pairs), S source length, T target length (pieces + 1), V vocabulary, N real target tokens.

log P(y | x) = sum_t log p(y_t | y_<t, x), over the target's pieces and its EOS (no label smoothing, no dropout),
from one forward pass per batch; per token: log P(y | x) / |y|, |y| = pieces + 1; perplexity exp(-per token).
Over a set: the token-weighted mean NLL, -sum log P / sum |y| (the validation NLL's definition,
training/validation.py), and its perplexity. An ensemble (ensemble.py) gives each token the log of its models'
mean probability, the probability its beam search multiplies.

Decisions:
- Pairs are sorted by length into batches of at most `max_tokens` padded tokens, B x max(S, T)
  (`batching.build_batches`) and padded by `batching.collate`, as the validation's batches are; the scores come
  back in input order.
- A pair whose source is empty (or whitespace only) is not scored: log_prob 0, tokens 0, per token and perplexity
  NaN, and it is left out of the totals (the translator gives such a line an empty translation without running the
  model). A non-empty source with an empty target is scored: one token, EOS, so its score is the log-probability
  of the empty translation, what search reports for an empty hypothesis.
- A source longer than the model's `max_positions` tokens is truncated as the translator truncates it (EOS kept
  last), a target to `max_positions - 1` pieces (then its EOS), each with a warning naming the line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from transformer.data.batching import Batch, build_batches, collate
from transformer.data.prepare import EncodedSplit
from transformer.data.tokenizer import BOS_ID, EOS_ID
from transformer.decoding.ensemble import mean_log_probs, members
from transformer.errors import UserError
from transformer.precision import autocast

log = logging.getLogger(__name__)


def _exp(x: float) -> float:
    return math.exp(x) if x < 709 else math.inf  # beyond, a float overflows


@dataclass
class Score:
    """One target's score given its source."""

    log_prob: float  # log P(target | source): the sum over its pieces and EOS (0.0 when not scored)
    tokens: int  # target tokens scored: pieces + EOS (0 when not scored: an empty source)

    @property
    def per_token(self) -> float:
        """log_prob / tokens; NaN when not scored."""
        return self.log_prob / self.tokens if self.tokens else math.nan

    @property
    def ppl(self) -> float:
        """Perplexity exp(-log_prob / tokens); NaN when not scored."""
        return _exp(-self.per_token) if self.tokens else math.nan


def totals(scores: Sequence[Score]) -> dict[str, Any]:
    """The set's figures: pairs, pairs scored, tokens, summed log-probability, token-weighted mean NLL (nats per
    token; NaN with no token) and its perplexity."""
    tokens = sum(s.tokens for s in scores)
    log_prob = sum(s.log_prob for s in scores)
    nll = -log_prob / tokens if tokens else math.nan
    return {
        "sentences": len(scores),
        "scored": sum(1 for s in scores if s.tokens),
        "tokens": tokens,
        "log_prob": log_prob,
        "nll": nll,
        "ppl": _exp(nll) if tokens else math.nan,
    }


@torch.inference_mode()
def target_log_probs(model, batch: Batch, *, precision: str) -> torch.Tensor:
    """(N,) float32: log p(y_t | y_<t, x) of every real target token of `batch` (pieces and EOS, pad left out),
    in the order of `batch.tgt_index`; an ensemble's is the log of its models' mean probability."""
    labels = batch.tgt_out.flatten().index_select(0, batch.tgt_index)  # (N,)
    per_model = []
    for one in members(model):
        with autocast(precision, batch.src.device):
            logits = one(batch.src, batch.tgt_in, positions=batch.tgt_index)  # (N, V)
        log_probs = logits.float().log_softmax(dim=-1)  # (N, V)
        per_model.append(log_probs.gather(1, labels[:, None]).squeeze(1))  # (N,)
    return mean_log_probs(per_model)


def score_ids(
    model,
    sources: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]],
    *,
    max_tokens: int,
    device: torch.device,
    precision: str,
    progress: Callable[[int], Any] | None = None,
    bos_id: int = BOS_ID,
) -> list[Score]:
    """Sources as `encode_src` gives them (pieces + EOS), targets as `encode_tgt` does (pieces) -> one `Score`
    each, in input order. No truncation here: each side must fit the model's positions."""
    if not sources:
        return []
    split = EncodedSplit.from_lists(sources, targets)
    order, bounds = build_batches(split.src_lengths, split.tgt_lengths, max_tokens=max_tokens, seed=0)
    scores: list[Score] = [Score(0.0, 0)] * len(split)
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        indices = order[start:end].tolist()
        batch = collate(split, indices, bos_id=bos_id).to(device)
        token_log_probs = target_log_probs(model, batch, precision=precision).double()  # (N,)
        rows = batch.tgt_index // batch.tgt_out.size(1)  # (N,) each token's row in the batch
        sums = torch.zeros(len(indices), dtype=torch.float64, device=device).index_add_(0, rows, token_log_probs)
        for i, total in zip(indices, sums.tolist()):
            scores[i] = Score(total, int(split.tgt_lengths[i]))
        if progress:
            progress(len(indices))
    return scores


def _truncate(ids: list[int], limit: int, line: int, side: str) -> list[int]:
    """At most `limit` ids: a source keeps its EOS last; a target (pieces) keeps its first `limit` pieces."""
    if len(ids) <= limit:
        return ids
    eos = int(side == "target")  # a target's EOS comes after its pieces
    log.warning("line %d: %d %s tokens, truncated to %d (the model's maximum)", line, len(ids) + eos, side, limit + eos)
    return ids[: limit - 1] + [EOS_ID] if side == "source" else ids[:limit]


def score_texts(
    model,
    tokenizer,
    sources: Sequence[str],
    targets: Sequence[str],
    *,
    max_tokens: int,
    device: torch.device,
    precision: str,
    progress: Callable[[int], Any] | None = None,
) -> list[Score]:
    """Source and target sentences, line-aligned -> one `Score` per pair, in input order (see the module
    docstring for empty and over-long lines). `progress` is called with the number of pairs each batch finished."""
    if len(sources) != len(targets):
        raise UserError(f"{len(sources)} sources but {len(targets)} targets: score them in line-aligned pairs")
    todo = [i for i, text in enumerate(sources) if text.strip()]
    if progress and len(todo) < len(sources):
        progress(len(sources) - len(todo))
    limit = model.max_positions
    src = [
        _truncate(ids, limit, i + 1, "source")
        for i, ids in zip(todo, tokenizer.encode_src([sources[i].strip() for i in todo]))
    ]
    tgt = [
        _truncate(ids, limit - 1, i + 1, "target")
        for i, ids in zip(todo, tokenizer.encode_tgt([targets[i].strip() for i in todo]))
    ]
    scores = [Score(0.0, 0) for _ in sources]
    found = score_ids(
        model,
        src,
        tgt,
        max_tokens=max_tokens,
        device=device,
        precision=precision,
        progress=progress,
        bos_id=tokenizer.bos_id,
    )
    for i, score in zip(todo, found):
        scores[i] = score
    return scores
