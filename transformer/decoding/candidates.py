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
    values, where, _ = _top(log_probs, scores, k, best=False)
    return values, where


def top_candidates_and_best(log_probs: torch.Tensor, scores: torch.Tensor, k: int):
    """`top_candidates`, and each hypothesis's best piece (B, K) long: log_probs.argmax(dim=2), the first of equal
    maxima, found from the chunk maxima that `top_candidates` reads anyway (the first chunk holding the row's
    maximum, then the first maximum within it): twice as fast as argmax over V on the CPU (docs/benchmarks.md,
    "Constrained beam search on CPU"). The constraints' candidates need it (constraints.py)."""
    return _top(log_probs, scores, k, best=True)


def _top(log_probs: torch.Tensor, scores: torch.Tensor, k: int, *, best: bool):
    """values, where (B, k) as `top_candidates` returns them, and the best pieces (B, K) when `best` (else None)."""
    B, K, V = log_probs.shape
    c = _chunk_size(V)
    if c == 0 or k * c >= K * V:
        values, index = (log_probs + scores[:, :, None]).view(B, K * V).topk(k, dim=1)  # (B, k)
        pieces = log_probs.argmax(dim=2) if best else None  # (B, K)
        return values, index + torch.arange(0, B * K * V, K * V, device=index.device)[:, None], pieces
    C = V // c  # chunks per hypothesis
    chunks = log_probs.view(B * K * C, c)  # every chunk of every hypothesis, chunk i of row r at r*C + i
    maxima = chunks.amax(dim=1).view(B, K, C)  # (B, K, C): each chunk's best piece
    pieces = _best_pieces(chunks, maxima) if best else None  # before the scores are added: ties stay as they are
    maxima.add_(scores[:, :, None])  # (B, K, C): each chunk's best candidate
    chosen = maxima.view(B, K * C).topk(k, dim=1).indices  # (B, k)
    chosen += torch.arange(0, B * K * C, K * C, device=chosen.device)[:, None]  # (B, k) chunks of `chunks`
    inside = chunks.index_select(0, chosen.view(-1)).view(B, k, c)  # (B, k, c): whole chunks, contiguous copies
    inside += scores.take(chosen // C)[:, :, None]  # (B, k, c) candidate scores
    values, index = inside.view(B, k * c).topk(k, dim=1)  # (B, k)
    return values, chosen.gather(1, index // c) * c + index % c, pieces


def _best_pieces(chunks: torch.Tensor, maxima: torch.Tensor) -> torch.Tensor:
    """chunks (N*C, c) every row's pieces chunk by chunk, maxima (B, K, C) their maxima -> (B, K) each row's argmax."""
    B, K, C = maxima.shape
    c = chunks.size(1)
    first = maxima.argmax(dim=2).view(-1)  # (N,) the first chunk holding the row's maximum
    rows = torch.arange(B * K, device=first.device) * C + first  # (N,) that chunk's place in `chunks`
    return (first * c + chunks.index_select(0, rows).argmax(dim=1)).view(B, K)


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
