"""The plain lexically constrained search control, row by row in Python (as decoding/constraints.py was before its
state moved into tensors): the oracle its vectorised `LexicalConstraints` is held equal to, token for token and score
for score (tests/test_constraints.py). It reads the one automaton, decoding/phrases.py's `Phrases`, a state at a
time; a phrase that must end a word (`word_ends`) bans the pieces that continue a word (`continuations`) in the row
whose newest piece met it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from transformer.decoding.candidates import top_candidates
from transformer.decoding.controls import RowSentences
from transformer.decoding.phrases import START, Phrases

NEG_INF = float("-inf")


class PlainLexicalConstraints(RowSentences):
    def __init__(
        self, constraints, *, eos_id: int, limits: Sequence[int] | None = None, device="cpu", **word_rule
    ) -> None:
        super().__init__(len(constraints), device)
        self.sets = [Phrases(phrases) for phrases in constraints]
        self.eos_id = eos_id
        self.limits = list(limits) if limits is not None else [None] * len(constraints)
        self.states = [START] * len(constraints)
        ends = word_rule.get("word_ends") or [[] for _ in constraints]
        self.word_ends = [_bits(phrases, flags) for phrases, flags in zip(constraints, ends)]  # a bit per phrase
        continuations = word_rule.get("continuations")
        self.continuations = [] if continuations is None else continuations.nonzero().flatten().tolist()

    def moved(self, rows: torch.Tensor) -> None:
        self.states = [self.states[r] for r in rows.tolist()]

    def mask(self, log_probs: torch.Tensor, tokens: torch.Tensor, step: int) -> torch.Tensor:
        sentences = self.sentence.tolist()
        sets = [self.sets[b] for b in sentences]
        if step > 0:
            newest = tokens[:, -1].tolist()
            before = self.states
            self.states = [s.advance(state, t) for s, state, t in zip(sets, self.states, newest)]
            for r, (old, new) in enumerate(zip(before, self.states)):
                if new.met & ~old.met & self.word_ends[sentences[r]] and self.continuations:
                    log_probs[r, self.continuations] = NEG_INF  # a phrase that ends a word was just met
        unmet = [r for r, (s, state) in enumerate(zip(sets, self.states)) if not s.complete(state)]
        if unmet:
            log_probs[torch.tensor(unmet, device=log_probs.device), self.eos_id] = NEG_INF
        for r in unmet:
            limit = self.limits[sentences[r]]
            left, need = None if limit is None else limit - step, sets[r].tokens - sets[r].bank(self.states[r])
            if left is not None and need >= left:
                allowed = sets[r].advancing(self.states[r]) if need == left else []
                kept = log_probs[r, allowed].clone()
                log_probs[r] = NEG_INF
                log_probs[r, allowed] = kept
        return log_probs

    def select(self, log_probs: torch.Tensor, scores: torch.Tensor, k: int):
        values, where = top_candidates(log_probs, scores, k)
        priority = values.clone()
        B, K, _ = log_probs.shape
        sentences = self.sentence.view(B, K)[:, 0].tolist()
        best = log_probs.argmax(dim=2).tolist()
        for b, sentence in enumerate(sentences):
            if self.sets[sentence].phrases:
                picked = self._allocate(b, self.sets[sentence], log_probs, scores, values[b], where[b], best[b])
                for out, row in zip((values, where, priority), _padded(picked, k, b * K * log_probs.size(2))):
                    out[b] = row.to(out.device, out.dtype)
        return values, where, priority

    def _allocate(self, b, phrases: Phrases, log_probs, scores, values, where, best) -> list[tuple[float, int]]:
        _, K, V = log_probs.shape
        found = {(w // V - b * K, w % V): v for v, w in zip(values.tolist(), where.tolist()) if v > NEG_INF}
        states = self.states[b * K : (b + 1) * K]
        extra = [(h, t) for h in range(K) for t in [best[h], *phrases.next_tokens(states[h])]]
        hs, ts = (torch.tensor(side, device=log_probs.device) for side in zip(*extra))
        extra_scores = (log_probs[b, hs, ts] + scores[b, hs]).tolist()
        found.update((c, v) for c, v in zip(extra, extra_scores) if v > NEG_INF)
        banked = sorted(
            ((phrases.bank(phrases.advance(states[h], t)), v, h, t) for (h, t), v in found.items()),
            key=lambda c: (-c[0], -c[1]),
        )
        stripes, ranks = [], {}
        for bank, v, h, t in banked:
            ranks[bank] = ranks.get(bank, -1) + 1
            stripes.append((ranks[bank] * (phrases.tokens + 1) + phrases.tokens - bank, v, (b * K + h) * V + t))
        stripes.sort(key=lambda c: c[0])
        return [(v, place) for _, v, place in stripes]


def _bits(phrases, flags) -> int:
    """Bit i set: the i-th phrase of `Phrases` (empty ones left out) must end a word."""
    kept = [flag for phrase, flag in zip(phrases, flags) if len(phrase)]
    return sum(1 << i for i, flag in enumerate(kept) if flag)


def _padded(picked: list[tuple[float, int]], k: int, first_place: int) -> tuple[torch.Tensor, ...]:
    picked = picked[:k] + [(NEG_INF, first_place)] * (k - len(picked))
    values = torch.tensor([v for v, _ in picked])
    where = torch.tensor([w for _, w in picked])
    priority = torch.arange(k, 0, -1, dtype=torch.float).masked_fill(values == NEG_INF, NEG_INF)
    return values, where, priority
