"""Beam search's candidates: the best one-token extensions of each sentence's hypotheses (the top 2K of the K x V),
read chunk by chunk, and the plain selection that the search uses when no control chooses (interface.py).

Legend: B batch (sentences), K hypotheses per sentence, V vocabulary.
"""

from __future__ import annotations

import functools

import torch


def top_candidates(log_probs: torch.Tensor, scores: torch.Tensor, k: int):
    """The k best one-token extensions of each sentence's hypotheses, best first: candidate (beam, word) scores
    scores[b, beam] + log_probs[b, beam, word]. log_probs (B, K, V), scores (B, K) -> values (B, k) and where they
    are in log_probs seen as (B*K*V,) (B, k) long: row b*K + beam = where // V, word = where % V.

    topk over all K*V candidates reads them one by one, slowly on the CPU. When V splits into chunks of c words
    (`_chunk_size`), the k chunks with the highest maxima hold the k best candidates (a candidate elsewhere is at
    most its chunk's maximum, so below k candidates that are at least as good), and topk reads just those k*c.
    The values are the same sums either way; only the order among exactly equal candidates may differ.
    """
    B, K, V = log_probs.shape
    c = _chunk_size(V)
    if c == 0 or k * c >= K * V:
        values, index = (log_probs + scores[:, :, None]).view(B, K * V).topk(k, dim=1)  # (B, k)
        return values, index + torch.arange(0, B * K * V, K * V, device=index.device)[:, None]
    C = V // c  # chunks per hypothesis
    chunks = log_probs.view(B * K * C, c)  # every chunk of every hypothesis, chunk i of row r at r*C + i
    maxima = chunks.amax(dim=1).view(B, K, C).add_(scores[:, :, None])  # (B, K, C): each chunk's best candidate
    best = maxima.view(B, K * C).topk(k, dim=1).indices  # (B, k)
    best += torch.arange(0, B * K * C, K * C, device=best.device)[:, None]  # (B, k) chunks of `chunks`
    inside = chunks.index_select(0, best.view(-1)).view(B, k, c)  # (B, k, c): whole chunks, contiguous copies
    inside += scores.take(best // C)[:, :, None]  # (B, k, c) candidate scores
    values, index = inside.view(B, k * c).topk(k, dim=1)  # (B, k)
    return values, best.gather(1, index // c) * c + index % c


@functools.cache
def _chunk_size(V: int) -> int:  # noqa: N803
    """The chunk size for `top_candidates`: the divisor of V in 64..512 that is a multiple of 8 (whole vectors)
    nearest 160, or 0 if none; measured fastest for V = 4k to 37k (docs/benchmarks.md, "The top 2K candidates read
    chunk by chunk")."""
    divisors = [c for c in range(64, 513, 8) if V % c == 0]
    return min(divisors, key=lambda c: abs(c - 160), default=0)


def select_top(log_probs: torch.Tensor, scores: torch.Tensor, k: int):
    """The plain selection (interface.py's `CandidateSelector.select`): the top k candidates, their priority their
    score. log_probs (B, K, V), scores (B, K) -> values, where, priority, each (B, k)."""
    values, where = top_candidates(log_probs, scores, k)
    return values, where, values
