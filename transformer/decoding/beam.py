"""Batched beam search (paper section 6.1) over N = B*K rows with the KV cache.

Legend: B batch (sentences), S source length, V vocabulary, K beam, N = B*K rows, t tokens decoded so far.

Decisions (the paper: beam 4, alpha 0.6, maximum length input + 50, "terminate early when possible"; the maximum
lengths, the length penalty and the forbidden tokens are steps.py's):
- Beam search follows fairseq's scheme over N = B*K rows with the KV cache (the prefix is never recomputed).
  The first step extends each sentence's one hypothesis (K copies of BOS would be alike, so it runs on B rows) and
  its K best candidates become the beams. Each step takes the top 2K of the K x V candidates; an EOS candidate
  among the first K ranks finishes (score = log P / lp); the best K non-EOS candidates stay alive, so K stay alive
  while finished ones leave. A sentence is done when it has K finished hypotheses (fairseq's early stop; no bound
  on what its alive hypotheses could still reach is checked) or at its maximum length, where its alive
  hypotheses are finalised. Done sentences leave the batch at once (their rows leave the cache), as in fairseq.
- The candidates come from the controls' `select` (interface.py's `CandidateSelector`): candidates.py's top 2K,
  the same as `topk` over all K x V read chunk by chunk, unless a control chooses (constraints.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from transformer.decoding.controls import Controls
from transformer.decoding.steps import NEG_INF, Hypothesis, lp, max_output_lengths, next_log_probs, start_cache


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
        log_probs = next_log_probs(model, state.tokens, movers[0], controls, step, bos_id, eos_id, min_len)  # (N, V)
        rows = _beam_step(state, log_probs, eos_id, K, controls.select)  # (N,)
        step += 1
        _finalise_at_max_length(state, step)
        _move(movers, state, rows)
    return [sorted(hyps, key=lambda h: h.score, reverse=True)[:nbest] for hyps in state.finished]
