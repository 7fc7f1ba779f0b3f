"""Lexically constrained decoding: phrases the output must contain, in any order, by dynamic beam allocation (Post
and Vilar 2018, "Fast Lexically Constrained Decoding with Dynamic Beam Allocation for Neural Machine Translation",
NAACL), with the candidates arranged as in Hu et al. 2019 ("Improved Lexically Constrained Decoding for
Translation and Monolingual Rewriting", NAACL), whose vectorized version fairseq's `LexicallyConstrainedBeamSearch`
is. A search control (controls.py) with its own candidate selection (interface.py's `CandidateSelector`).

Legend: B batch (sentences), V vocabulary, K beams per sentence, N = B*K rows.

How:
- Each row keeps a `ConstraintState`: which phrases its history has met, and the phrase it is in the middle of
  (how many of its pieces match the history's end). A piece that does not continue that phrase falls back to the
  longest end of the history that begins an unmet phrase (as a KMP automaton does). The constraints are met in any
  order, each once; two phrases that overlap in the output count as one met (their pieces are not shared).
- A row may end (EOS) only once every phrase is met: `mask` forbids EOS before. Given the sentences' maximum
  output lengths (`limits`), `mask` also keeps a row from ending at that length unmet: a row with exactly as many
  steps left as unmet constraint pieces may only advance a phrase, a row with fewer is dropped (-inf). The first
  phrase's forced pieces always stay possible, so a sentence whose phrases fit keeps a hypothesis that meets them.
- `select` (Post & Vilar's step): the candidates of a sentence are the top 2K of its K x V extensions, each
  hypothesis's best next piece, and each hypothesis's pieces that advance an unmet phrase. A candidate's bank is
  the number of constraint pieces met once it is taken. Candidates are sorted by bank, then by score, and dealt
  round robin over the banks, from the fullest bank down (Hu et al.'s "stripes"), so every bank keeps places in the
  beam; beam search keeps the first K that are not EOS and finishes an EOS among the first K (search.py).
- A sentence without constraints gets the plain top 2K, unchanged.
- The banks share the beam, so K must be wider than for plain search (Post & Vilar: larger than the constraint
  pieces; they decode with beams of 10 to 20): the translator searches the sentences with constraints apart, with
  a beam of max(beam_size, decode.constraint_beam_size) (translator.py's `_search_groups`).
- Feasibility (whether the phrases fit the maximum output length) is checked by the caller (translator.py), which
  reports the sentences whose phrases cannot fit; a search that reaches the maximum length before meeting them
  all ends as it is (search.py), and the caller reports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from transformer.decoding.candidates import top_candidates
from transformer.decoding.controls import RowSentences

NEG_INF = float("-inf")


class ConstraintState(NamedTuple):
    met: int  # bit i set: phrase i is in the history
    phrase: int  # the phrase in progress, -1 for none
    matched: int  # how many of its pieces end the history


START = ConstraintState(0, -1, 0)


class Phrases:
    """One sentence's constraints: phrases of target ids, each to appear once in the output, in any order."""

    def __init__(self, phrases: Sequence[Sequence[int]]) -> None:
        self.phrases = [tuple(p) for p in phrases if len(p)]
        self.every = (1 << len(self.phrases)) - 1
        self.tokens = sum(len(p) for p in self.phrases)  # the most banks: pieces to meet in all

    def advance(self, state: ConstraintState, token: int) -> ConstraintState:
        """The state after `token`: the phrase in progress goes on; else the longest end of (its matched pieces,
        `token`) that begins an unmet phrase is the new progress (as a KMP automaton falls back), or none."""
        met, phrase, matched = state
        if phrase >= 0 and self.phrases[phrase][matched] == token:
            return self._matched(met, phrase, matched + 1)
        tail = (self.phrases[phrase][:matched] if phrase >= 0 else ()) + (token,)
        for start in range(len(tail)):
            end = tail[start:]
            for i, pieces in enumerate(self.phrases):
                if not met >> i & 1 and pieces[: len(end)] == end:
                    return self._matched(met, i, len(end))
        return ConstraintState(met, -1, 0)

    def _matched(self, met: int, phrase: int, matched: int) -> ConstraintState:
        if matched == len(self.phrases[phrase]):
            return ConstraintState(met | 1 << phrase, -1, 0)
        return ConstraintState(met, phrase, matched)

    def next_tokens(self, state: ConstraintState) -> list[int]:
        """The pieces that advance a phrase: the next of the one in progress and the first of each unmet one."""
        starts = [p[0] for i, p in enumerate(self.phrases) if not state.met >> i & 1]
        return starts + ([self.phrases[state.phrase][state.matched]] if state.phrase >= 0 else [])

    def advancing(self, state: ConstraintState) -> list[int]:
        """The pieces after which one more constraint piece is met."""
        bank = self.bank(state)
        return [t for t in self.next_tokens(state) if self.bank(self.advance(state, t)) > bank]

    def bank(self, state: ConstraintState) -> int:
        """Constraint pieces met: those of the met phrases and the matched ones of the phrase in progress."""
        return sum(len(p) for i, p in enumerate(self.phrases) if state.met >> i & 1) + state.matched

    def complete(self, state: ConstraintState) -> bool:
        return state.met == self.every


class LexicalConstraints(RowSentences):
    """Dynamic beam allocation over the rows of one batch (see the module docstring). constraints: B lists of
    phrases (each a list of target ids; an empty list: no constraints for that sentence)."""

    def __init__(
        self,
        constraints: Sequence[Sequence[Sequence[int]]],
        *,
        eos_id: int,
        limits: Sequence[int] | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(len(constraints), device)
        self.sets = [Phrases(phrases) for phrases in constraints]
        self.eos_id = eos_id
        self.limits = list(limits) if limits is not None else [None] * len(constraints)  # maximum output lengths
        self.states = [START] * len(constraints)  # per row: the state of its history up to the last mask

    def moved(self, rows: torch.Tensor) -> None:
        self.states = [self.states[r] for r in rows.tolist()]

    def mask(self, log_probs: torch.Tensor, tokens: torch.Tensor, step: int) -> torch.Tensor:
        """Advances each row's state by its newest piece; EOS is -inf for the rows with a phrase unmet, and a row
        with just enough steps left for its unmet pieces may only advance them (none left: every piece -inf)."""
        sentences = self.sentence.tolist()
        sets = [self.sets[b] for b in sentences]
        if step > 0:
            newest = tokens[:, -1].tolist()
            self.states = [s.advance(state, t) for s, state, t in zip(sets, self.states, newest)]
        unmet = [r for r, (s, state) in enumerate(zip(sets, self.states)) if not s.complete(state)]
        if unmet:
            log_probs[torch.tensor(unmet, device=log_probs.device), self.eos_id] = NEG_INF
        for r in unmet:
            left, need = self._steps_left(sentences[r], step), sets[r].tokens - sets[r].bank(self.states[r])
            if left is not None and need >= left:
                allowed = sets[r].advancing(self.states[r]) if need == left else []
                kept = log_probs[r, allowed].clone()
                log_probs[r] = NEG_INF
                log_probs[r, allowed] = kept
        return log_probs

    def _steps_left(self, sentence: int, step: int) -> int | None:
        limit = self.limits[sentence]
        return None if limit is None else limit - step

    def select(self, log_probs: torch.Tensor, scores: torch.Tensor, k: int):
        """interface.py's `CandidateSelector.select`: log_probs (B, K, V), scores (B, K) -> values, where,
        priority (B, k); a sentence with constraints gets Post & Vilar's allocation, the others the top k."""
        values, where = top_candidates(log_probs, scores, k)  # (B, k) each
        priority = values.clone()  # (B, k)
        B, K, _ = log_probs.shape
        sentences = self.sentence.view(B, K)[:, 0].tolist()
        best = log_probs.argmax(dim=2).tolist()  # (B, K) each hypothesis's best next piece
        for b, sentence in enumerate(sentences):
            if self.sets[sentence].phrases:
                picked = self._allocate(b, self.sets[sentence], log_probs, scores, values[b], where[b], best[b])
                for out, row in zip((values, where, priority), _padded(picked, k, b * K * log_probs.size(2))):
                    out[b] = row.to(out.device, out.dtype)
        return values, where, priority

    def _allocate(self, b, phrases: Phrases, log_probs, scores, values, where, best) -> list[tuple[float, int]]:
        """Sentence b's candidates in Post & Vilar's order: (score, place in log_probs seen as (B*K*V,))."""
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
        for bank, v, h, t in banked:  # the r-th best of each bank goes before every bank's (r+1)-th
            ranks[bank] = ranks.get(bank, -1) + 1
            stripes.append((ranks[bank] * (phrases.tokens + 1) + phrases.tokens - bank, v, (b * K + h) * V + t))
        stripes.sort(key=lambda c: c[0])
        return [(v, place) for _, v, place in stripes]


def _padded(picked: list[tuple[float, int]], k: int, first_place: int) -> tuple[torch.Tensor, ...]:
    """The first k candidates as (values, where, priority) rows of k, priority falling with the order; missing
    places are -inf candidates at the sentence's first place."""
    picked = picked[:k] + [(NEG_INF, first_place)] * (k - len(picked))
    values = torch.tensor([v for v, _ in picked])
    where = torch.tensor([w for _, w in picked])
    priority = torch.arange(k, 0, -1, dtype=torch.float).masked_fill(values == NEG_INF, NEG_INF)
    return values, where, priority
