"""The search over the decoder: greedy decoding and sampling (one hypothesis per row) here, batched beam search in
beam.py, and `generate`, the one dispatcher that `decode.search` steers (paper section 6.1 for beam search).

Legend: B batch (sentences), S source length, V vocabulary, K beam, N = B*K rows, t tokens decoded so far.

The searches depend only on the model's decoding interface (interface.py's Protocols): `encode`, `decode_step`,
`cache.rerank_beams`, `cache.keep_sentences`, and the attributes `max_positions` and `pad_id`; the cache comes from
model/cache.py's `init_cache`, or from the model's own `init_cache` where it brings one (an ensemble,
decoding/ensemble.py). The model knows nothing of search. Controls of the search (prefixes, constraints, n-gram
blocking; controls.py) plug in as one `Controls`: its `mask` once per step after the model's step, its moves with
the cache's, and beam search's candidates from its `select` (candidates.py's top 2K unless a control chooses).
What every search shares (maximum lengths, the length penalty, forbidden tokens) is steps.py's.

Decisions:
- Every setting is a required keyword argument: `DecodeConfig` (config/sections.py) holds the defaults, and `generate`
  passes them, with two rules for text: no empty output (EOS forbidden before max(`min_len`, 1) tokens: training
  drops pairs with an empty side, so an EOS first is nothing the model learned, yet the demo model put it first on
  180 of 200 single words, docs/decoding.md; fairseq's min_len is 1 too) and `decode.max_ngram_repeats`' limit on
  loops (controls.py's `RepeatRunLimit`).
- On a CUDA device (`decode.cuda_graphs`), beam search and greedy decoding run as graph_search.py's fixed-shape
  search, one captured graph replayed per step, where the model and the controls allow it (`_graphed`).
- Greedy decoding and sampling report score = log_prob (no penalty: it does not change their choices).
- Sampling (not in the paper): temperature, then top-k, then top-p (nucleus) filtering; `log_prob` is under the
  model's own distribution (temperature 1). n samples per sentence come back sorted by score.
- A row whose controls leave it no piece (they conflict: a prefix's piece or a constraint's, blocked as a repeat)
  goes on with any piece, its `log_prob` -inf: greedy decoding and sampling never end without a hypothesis, and the
  translator searches such a line again with its controls relaxed (relaxation.py). Beam search drops such rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from transformer.config import DecodeConfig
from transformer.decoding.beam import beam_search
from transformer.decoding.controls import Controls, NoRepeatNgram, RepeatRunLimit
from transformer.decoding.graph_search import graphed_search
from transformer.decoding.interface import CachingModel
from transformer.decoding.steps import (
    LENGTH_PENALTIES,
    NEG_INF,
    Hypothesis,
    lp,
    max_output_lengths,
    next_log_probs,
    start_cache,
)

__all__ = [
    "LENGTH_PENALTIES",
    "Hypothesis",
    "beam_search",
    "filter_logits",
    "generate",
    "greedy_decode",
    "lp",
    "max_output_lengths",
    "sample",
]


def _decode_rows(
    model,
    src,
    src_mask,
    choose: Callable,
    *,
    bos_id,
    eos_id,
    max_len_a,
    max_len_b,
    min_len,
    controls: Controls,
    drop_finished=False,
):
    """One hypothesis per row: extend each with `choose(log_probs (B, V)) -> (B,)` until EOS or its max length.

    drop_finished: finished rows leave the batch (and the cache) at the next step, as done sentences do in beam
    search; the other rows' computations are unchanged. Sampling keeps them, so its random stream stays the same.
    """
    B, device = src.size(0), src.device
    max_lens = max_output_lengths(model, src_mask, max_len_a, max_len_b)  # (B,)
    steps = int(max_lens.max().item()) if B else 0
    cache = start_cache(model, model.encode(src, src_mask), src_mask, capacity=steps)
    tokens = torch.full((B, 1), bos_id, dtype=torch.long, device=device)  # (B, 1)
    log_prob, lengths = torch.zeros(B, device=device), torch.zeros(B, dtype=torch.long, device=device)  # (B,) each
    alive, rows = max_lens > 0, torch.arange(B, device=device)  # (B,) each; rows: each batch row's input index
    done: dict[int, Hypothesis] = {}
    for step in range(steps):
        if drop_finished and not alive.all():
            _collect(done, rows[~alive], tokens[~alive], lengths[~alive], log_prob[~alive])
            keep = alive.nonzero().squeeze(1)  # (B',)
            if keep.numel() == 0:
                break
            for moving in (cache, controls):
                moving.keep_sentences(keep)
            tokens, log_prob, lengths, alive, max_lens, rows = (
                t[keep] for t in (tokens, log_prob, lengths, alive, max_lens, rows)
            )
        if not alive.any():
            break
        step_log_probs = next_log_probs(model, tokens, cache, controls, step, bos_id, eos_id, min_len)  # (B, V)
        next_tokens = choose(step_log_probs).masked_fill(~alive, model.pad_id)  # (B,)
        picked = step_log_probs.gather(1, next_tokens[:, None]).squeeze(1)  # (B,)
        log_prob += torch.where(alive, picked, torch.zeros_like(picked))
        tokens = torch.cat([tokens, next_tokens[:, None]], dim=1)  # (B, t+2)
        ended = alive & (next_tokens == eos_id)  # (B,)
        lengths += (alive & ~ended).long()
        alive = alive & ~ended & (step + 1 < max_lens)
    _collect(done, rows, tokens, lengths, log_prob)
    return [done[b] for b in range(B)]


def _collect(done: dict[int, Hypothesis], rows, tokens, lengths, log_prob) -> None:
    """done[input row] = its hypothesis: tokens (B', t+1) BOS first, lengths (B',), log_prob (B',)."""
    for b, row, n, total in zip(rows.tolist(), tokens[:, 1:].tolist(), lengths.tolist(), log_prob.tolist()):
        done[b] = Hypothesis(row[:n], total, total)


@torch.inference_mode()
def greedy_decode(
    model,
    src,
    src_mask,
    *,
    bos_id: int,
    eos_id: int,
    max_len_a: float,
    max_len_b: int,
    min_len: int,
    controls: Controls | None = None,
) -> list[Hypothesis]:
    """Argmax at every step. src (B, S) long, src_mask (B, 1, 1, S) bool -> B hypotheses, in input order."""
    lengths = dict(max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len, controls=controls or Controls())
    choose = lambda log_probs: log_probs.argmax(dim=-1)  # (B, V) -> (B,)
    return _decode_rows(model, src, src_mask, choose, bos_id=bos_id, eos_id=eos_id, drop_finished=True, **lengths)


def filter_logits(log_probs: torch.Tensor, *, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """(N, V) -> (N, V) logits: divided by the temperature, -inf outside the top k and outside the top-p mass."""
    logits = log_probs / temperature  # (N, V)
    if top_k > 0:
        kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]  # (N, 1)
        logits = logits.masked_fill(logits < kth, NEG_INF)
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (N, V)
        probs = sorted_logits.softmax(dim=-1)  # (N, V)
        drop_sorted = probs.cumsum(dim=-1) - probs >= top_p  # (N, V); the most likely token is always kept
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)  # (N, V) back in vocabulary order
        logits = logits.masked_fill(drop, NEG_INF)
    return logits


@torch.inference_mode()
def sample(
    model,
    src,
    src_mask,
    *,
    bos_id: int,
    eos_id: int,
    temperature: float,
    top_k: int,
    top_p: float,
    num_samples: int,
    max_len_a: float,
    max_len_b: int,
    min_len: int,
    generator: torch.Generator | None = None,
    controls: Controls | None = None,
) -> list[list[Hypothesis]]:
    """Ancestral sampling (not in the paper). `generator` lives on src's device and makes it reproducible.

    src (B, S) long, src_mask (B, 1, 1, S) bool -> B lists of `num_samples` hypotheses, best score first.
    """
    B = src.size(0)
    index = torch.arange(B, device=src.device).repeat_interleave(num_samples)  # (B*n,)

    def choose(log_probs: torch.Tensor) -> torch.Tensor:  # (B*n, V) -> (B*n,)
        logits = filter_logits(log_probs, temperature=temperature, top_k=top_k, top_p=top_p)
        probs = logits.softmax(dim=-1).nan_to_num(nan=1.0)  # (B*n, V); a row its controls left no piece: any piece
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    controls = controls or Controls()
    controls.keep_sentences(index)  # each sentence's controls repeated for its samples
    lengths = dict(max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len, controls=controls)
    hyps = _decode_rows(model, src[index], src_mask[index], choose, bos_id=bos_id, eos_id=eos_id, **lengths)
    groups = [hyps[b * num_samples : (b + 1) * num_samples] for b in range(B)]
    return [sorted(group, key=lambda h: h.score, reverse=True) for group in groups]


def _graphed(model, src: torch.Tensor, decode: DecodeConfig, controls: Controls) -> bool:
    """Whether beam search or greedy decoding takes graph_search.py's path: on CUDA with `decode.cuda_graphs`, a model
    that decodes with model/cache.py's cache (not an ensemble, which brings its own) and graphable controls."""
    return decode.cuda_graphs and src.is_cuda and not isinstance(model, CachingModel) and controls.graphable


def generate(
    model,
    src,
    src_mask,
    decode: DecodeConfig,
    *,
    bos_id: int,
    eos_id: int,
    generator: torch.Generator | None = None,
    controls: Sequence = (),
) -> list[list[Hypothesis]]:
    """The one dispatcher: `decode.search` picks sampling, greedy or beam search. -> B lists, best first.

    controls: the batch's search controls (controls.py, constraints.py), besides `decode.no_repeat_ngram_size`'s and
    `decode.max_ngram_repeats`'.
    """
    blocking = [NoRepeatNgram(decode.no_repeat_ngram_size)] if decode.no_repeat_ngram_size else []
    blocking += [RepeatRunLimit(decode.max_ngram_repeats)] if decode.max_ngram_repeats else []
    steer = Controls([*controls, *blocking])
    min_len = max(decode.min_len, 1)  # never an empty translation (module docstring)
    lengths = dict(max_len_a=decode.max_len_a, max_len_b=decode.max_len_b, min_len=min_len, controls=steer)
    ids = dict(bos_id=bos_id, eos_id=eos_id)
    if decode.search == "sampling":
        return sample(
            model,
            src,
            src_mask,
            temperature=decode.temperature,
            top_k=decode.top_k,
            top_p=decode.top_p,
            num_samples=decode.nbest,
            generator=generator,
            **ids,
            **lengths,
        )
    if decode.search != "sampling" and _graphed(model, src, decode, steer):
        search = dict(beam_size=decode.beam_size, alpha=decode.alpha, length_penalty=decode.length_penalty)
        return graphed_search(model, src, src_mask, nbest=decode.nbest, **search, **ids, **lengths)
    if decode.search == "greedy":
        return [[hyp] for hyp in greedy_decode(model, src, src_mask, **ids, **lengths)]
    return beam_search(
        model,
        src,
        src_mask,
        beam_size=decode.beam_size,
        alpha=decode.alpha,
        length_penalty=decode.length_penalty,
        nbest=decode.nbest,
        **ids,
        **lengths,
    )
