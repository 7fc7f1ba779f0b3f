"""Search over the decoder: greedy decoding, batched beam search (paper section 6.1) and sampling.

Legend: B batch (sentences), S source length, V vocabulary, K beam, N = B*K rows, t tokens decoded so far.

This module depends only on the model's decoding interface (interface.py's Protocols): `encode`, `decode_step`,
`cache.rerank_beams`, `cache.keep_sentences`, and the attributes `max_positions` and `pad_id`; the cache comes from
model/cache.py's `init_cache`, or from the model's own `init_cache` where it brings one (an ensemble,
decoding/ensemble.py). The model knows nothing of search. Controls of the search (prefixes, constraints, n-gram
blocking; controls.py) plug in as one `Controls`: its `mask` once per step after the model's step, its moves with
the cache's, and beam search's candidates from its `select` (candidates.py's top 2K unless a control chooses).

Decisions (the paper: beam 4, alpha 0.6, maximum length input + 50, "terminate early when possible"):
- Maximum output length, per sentence: floor(max_len_a * S + max_len_b) tokens, S the real (unpadded) source
  length in tokens (its EOS included), capped at `model.max_positions - 1`. The cap counts output tokens without
  EOS; a hypothesis that reaches it without EOS is finalised as it is (truncated), and its `log_prob` has no EOS term.
- Length penalty lp(Y) divides log P(Y) (`LENGTH_PENALTIES`): "gnmt" ((5+|Y|)/6)^alpha (Wu et al. 2016, the
  paper's), "fairseq" |Y|^alpha, "none" 1. |Y| counts the EOS of a finished hypothesis (as fairseq and OpenNMT-py
  count), at least 1.
- PAD and BOS are never generated; EOS is forbidden before `min_len` output tokens.
- Beam search follows fairseq's scheme over N = B*K rows with the KV cache (the prefix is never recomputed).
  The first step extends each sentence's one hypothesis (K copies of BOS would be alike, so it runs on B rows) and
  its K best candidates become the beams. Each step takes the top 2K of the K x V candidates; an EOS candidate
  among the first K ranks finishes (score = log P / lp); the best K non-EOS candidates stay alive, so K stay alive
  while finished ones leave. A sentence is done when it has K finished hypotheses (fairseq's early stop; no bound
  on what its alive hypotheses could still reach is checked) or at its maximum length, where its alive
  hypotheses are finalised. Done sentences leave the batch at once (their rows leave the cache), as in fairseq.
  The top 2K candidates come from `top_candidates`: the same as `topk` over all K x V, read chunk by chunk.
- Every setting is a required keyword argument: `DecodeConfig` (config/sections.py) holds the defaults, and `generate`
  passes them.
- Greedy decoding and sampling report score = log_prob (no penalty: it does not change their choices).
- Sampling (not in the paper): temperature, then top-k, then top-p (nucleus) filtering; `log_prob` is under the
  model's own distribution (temperature 1). n samples per sentence come back sorted by score.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from transformer.config import DecodeConfig
from transformer.decoding.controls import Controls, NoRepeatNgram
from transformer.model.cache import init_cache

NEG_INF = float("-inf")


@dataclass
class Hypothesis:
    """One output sentence of the search."""

    tokens: list[int]  # output ids, without BOS and EOS
    score: float  # the search's score: log P / length penalty
    log_prob: float  # sum of token log-probabilities, including EOS when finished


LENGTH_PENALTIES: dict[str, Callable] = {  # decode.length_penalty -> lp(|Y|, alpha); names: DecodeConfig's Literal
    "gnmt": lambda length, alpha: ((5 + length) / 6) ** alpha,  # Wu et al. 2016, the paper's
    "fairseq": lambda length, alpha: length**alpha,
    "none": lambda length, alpha: 1.0,
}


def lp(length, *, alpha: float, kind: str):
    """lp(|Y|) for score = log P(Y) / lp: `kind` names a formula of LENGTH_PENALTIES (an int or a tensor length)."""
    if kind not in LENGTH_PENALTIES:
        raise ValueError(f"unknown length penalty {kind!r}: use one of {', '.join(LENGTH_PENALTIES)}")
    return LENGTH_PENALTIES[kind](length, alpha)


def start_cache(model, memory, src_mask: torch.Tensor, *, capacity: int):
    """The cache for a search's first step, one row per sentence: the model's own where it brings one (an
    ensemble's `init_cache`), else model/cache.py's `DecoderCache`."""
    if hasattr(model, "init_cache"):
        return model.init_cache(memory, src_mask, beams=1, capacity=capacity)
    return init_cache(model, memory, src_mask, beams=1, capacity=capacity)


def max_output_lengths(model, src_mask: torch.Tensor, max_len_a: float, max_len_b: float) -> torch.Tensor:
    """src_mask (B, 1, 1, S) bool -> (B,) long: floor(a * S + b) per sentence, capped at max_positions - 1."""
    src_len = src_mask.flatten(1).sum(dim=1).double()  # (B,) real source lengths, EOS included
    limit = (src_len * max_len_a + max_len_b + 1e-6).floor().long()  # (B,)
    return limit.clamp(min=0, max=model.max_positions - 1)


def _forbid(log_probs: torch.Tensor, step: int, *, model, bos_id: int, eos_id: int, min_len: int) -> torch.Tensor:
    """(N, V) -> the same tensor, -inf at PAD and BOS, and at EOS while fewer than `min_len` tokens are out."""
    banned = (model.pad_id, bos_id) + ((eos_id,) if step < min_len else ())
    ban = _ban_row(banned, log_probs.dtype, log_probs.device)  # (max id + 1,): -inf at the banned ids, else 0
    log_probs[:, : ban.numel()] += ban  # one small in-place add over the first columns (the special ids)
    return log_probs


def _next_log_probs(model, tokens, cache, controls: Controls, step: int, bos_id: int, eos_id: int, min_len: int):
    """tokens (N, t+1) the rows so far -> (N, V): the model's next-token log-probabilities, PAD, BOS and early EOS
    forbidden (`_forbid`), then the controls' mask (controls.py), once per step."""
    log_probs = model.decode_step(tokens[:, -1:], cache)  # (N, V)
    log_probs = _forbid(log_probs, step, model=model, bos_id=bos_id, eos_id=eos_id, min_len=min_len)
    return controls.mask(log_probs, tokens, step)  # (N, V)


@functools.cache
def _ban_row(banned: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    row = torch.zeros(max(banned) + 1, dtype=dtype, device=device)
    row[list(banned)] = NEG_INF
    return row


# ------------------------------------------------------------------------------------ greedy and sampling


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
        step_log_probs = _next_log_probs(model, tokens, cache, controls, step, bos_id, eos_id, min_len)  # (B, V)
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
    for b, row, n, lp in zip(rows.tolist(), tokens[:, 1:].tolist(), lengths.tolist(), log_prob.tolist()):
        done[b] = Hypothesis(row[:n], lp, lp)


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
        return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(1)

    controls = controls or Controls()
    controls.keep_sentences(index)  # each sentence's controls repeated for its samples
    lengths = dict(max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len, controls=controls)
    hyps = _decode_rows(model, src[index], src_mask[index], choose, bos_id=bos_id, eos_id=eos_id, **lengths)
    groups = [hyps[b * num_samples : (b + 1) * num_samples] for b in range(B)]
    return [sorted(group, key=lambda h: h.score, reverse=True) for group in groups]


# ---------------------------------------------------------------------------------------------- beam search


@dataclass
class _BeamState:
    tokens: torch.Tensor  # (N, t+1) long, BOS first: the alive hypotheses, sentence b in rows b*K .. b*K+K-1
    scores: torch.Tensor  # (B, K) float, log P of each alive hypothesis; -inf for empty slots
    max_lens: list[int]  # (B,) each batch row's maximum output length
    sentence: list[int]  # (B,) each batch row's index in the input: done sentences leave the batch
    finished: list[list[Hypothesis]]  # per input sentence
    done: set[int]  # batch rows done during this step, to leave the batch at its end
    score_fn: Callable[[float, int], float]  # (log P, length) -> log P / lp(length)


def _finish(state: _BeamState, batch_rows: list[int], rows: list[int], log_probs: list[float], eos: bool) -> None:
    """Move hypotheses (rows of state.tokens, plus EOS when `eos`) to their sentences' finished lists."""
    if not rows:
        return
    histories = state.tokens[torch.tensor(rows, device=state.tokens.device), 1:].tolist()
    for b, tokens, log_prob in zip(batch_rows, histories, log_probs):
        length = len(tokens) + int(eos)
        state.finished[state.sentence[b]].append(Hypothesis(tokens, state.score_fn(log_prob, max(length, 1)), log_prob))


def _beam_step(state: _BeamState, log_probs: torch.Tensor, eos_id: int, K: int, select: Callable) -> torch.Tensor:  # noqa: N803
    """Extend every alive hypothesis by every token, finish EOS candidates, keep K; returns the rows kept (B*K,).

    log_probs (B*K_in, V): K_in alive rows per sentence, 1 at the first step, then K (or fewer while K
    exceeds the candidates, K_in * V: only with tiny vocabularies). select: the controls' (interface.py's
    `CandidateSelector.select`), by default the top 2K with their scores as priority.
    """
    B, K_in = state.scores.shape
    V = log_probs.size(-1)
    top_scores, where, priority = select(log_probs.view(B, K_in, V), state.scores, min(2 * K, K_in * V))  # (B, 2K)
    is_eos = where % V == eos_id  # (B, 2K)
    finishing = is_eos[:, :K] & (top_scores[:, :K] > NEG_INF)  # (B, K): an EOS among the first K ranks
    hits = finishing.nonzero().tolist()
    if hits:
        top_list, where_list = top_scores.tolist(), where.tolist()
        rows = [where_list[b][j] // V for b, j in hits]
        _finish(state, [b for b, _ in hits], rows, [top_list[b][j] for b, j in hits], eos=True)
        state.done.update(b for b, _ in hits if len(state.finished[state.sentence[b]]) >= K)
    keep = priority.masked_fill(is_eos, NEG_INF).topk(min(K, top_scores.size(1)), dim=1).indices  # (B, K)
    alive_scores = top_scores.masked_fill(is_eos, NEG_INF).gather(1, keep)  # (B, K)
    kept = where.gather(1, keep).view(-1)  # (B*K,)
    rows = kept // V  # (B*K,) rows of log_probs
    state.tokens = torch.cat([state.tokens[rows], (kept % V)[:, None]], dim=1)  # (N, t+2)
    state.scores = alive_scores  # (B, K)
    return rows


def _finalise_at_max_length(state: _BeamState, length: int) -> None:
    """Sentences whose maximum length is `length`: their alive hypotheses become finished, without EOS."""
    ending = [b for b, limit in enumerate(state.max_lens) if limit == length and b not in state.done]
    if not ending:
        return
    K = state.scores.size(1)
    scores = state.scores.tolist()
    slots = [(b, k) for b in ending for k in range(K) if math.isfinite(scores[b][k])]
    _finish(state, [b for b, _ in slots], [b * K + k for b, k in slots], [scores[b][k] for b, k in slots], eos=False)
    state.done.update(ending)


def _drop_done(state: _BeamState, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Remove the done sentences from the batch (in `_stay_order`); returns the sentences that stay (B',) and their
    rows of `rows` (N',)."""
    B, K = state.scores.shape
    keep = _stay_order(B, state.done)
    sentences = torch.tensor(keep, dtype=torch.long, device=rows.device)  # (B',)
    keep_rows = (sentences[:, None] * K + torch.arange(K, device=rows.device)).view(-1)  # (N',)
    state.tokens, state.scores = state.tokens[keep_rows], state.scores[sentences]
    state.max_lens = [state.max_lens[b] for b in keep]
    state.sentence = [state.sentence[b] for b in keep]
    state.done = set()
    return sentences, rows[keep_rows]


def _stay_order(B: int, leaving: set[int]) -> list[int]:  # noqa: N803
    """The batch rows that stay, in their new order: the last ones move into the places of those that leave before
    them, the others keep their places, so the cache moves only those (`LayerCache.keep_sentences`)."""
    keep = list(range(B))
    stay = [b for b in range(B) if b not in leaving]
    for hole, mover in zip(sorted(leaving), reversed(stay)):
        if hole >= len(stay):  # the rest leave from the end
            break
        keep[hole] = mover
    return keep[: len(stay)]


def _move(movers: tuple, state: _BeamState, rows: torch.Tensor) -> None:
    """After a step, the cache's and the controls' rows follow the beams: done sentences leave (the rest re-ranked
    in the same copy), or the beams are re-ranked."""
    if state.done:
        moves = _drop_done(state, rows)
        for mover in movers:
            mover.keep_sentences(*moves)
    else:
        for mover in movers:
            mover.rerank_beams(rows)


@torch.inference_mode()
def beam_search(
    model,
    src,
    src_mask,
    *,
    bos_id: int,
    eos_id: int,
    beam_size: int,
    alpha: float,
    length_penalty: str,
    max_len_a: float,
    max_len_b: int,
    min_len: int,
    nbest: int,
    controls: Controls | None = None,
) -> list[list[Hypothesis]]:
    """Batched beam search with the KV cache (see the module docstring for the exact rules).

    src (B, S) long, src_mask (B, 1, 1, S) bool -> B lists of up to `nbest` hypotheses, best score first.
    """
    B, K, controls = src.size(0), beam_size, controls or Controls()
    device = src.device
    state = _BeamState(  # one hypothesis per sentence until the first step makes K
        tokens=torch.full((B, 1), bos_id, dtype=torch.long, device=device),
        scores=torch.zeros(B, 1, device=device),
        max_lens=max_output_lengths(model, src_mask, max_len_a, max_len_b).tolist(),
        sentence=list(range(B)),
        finished=[[] for _ in range(B)],
        done=set(),
        score_fn=lambda log_prob, length: log_prob / lp(length, alpha=alpha, kind=length_penalty),
    )
    _finalise_at_max_length(state, 0)
    capacity = max(state.max_lens, default=0)
    movers = (start_cache(model, model.encode(src, src_mask), src_mask, capacity=capacity), controls)
    if state.done:  # those with room for no token leave
        _move(movers, state, torch.arange(B, device=device))
    step = 0
    while state.sentence:
        log_probs = _next_log_probs(model, state.tokens, movers[0], controls, step, bos_id, eos_id, min_len)  # (N, V)
        rows = _beam_step(state, log_probs, eos_id, K, controls.select)  # (N,)
        step += 1
        _finalise_at_max_length(state, step)
        _move(movers, state, rows)
    return [sorted(hyps, key=lambda h: h.score, reverse=True)[:nbest] for hyps in state.finished]


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

    controls: the batch's search controls (controls.py, constraints.py), besides `decode.no_repeat_ngram_size`'s.
    """
    blocking = [NoRepeatNgram(decode.no_repeat_ngram_size)] if decode.no_repeat_ngram_size else []
    steer = Controls([*controls, *blocking])
    lengths = dict(max_len_a=decode.max_len_a, max_len_b=decode.max_len_b, min_len=decode.min_len, controls=steer)
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
