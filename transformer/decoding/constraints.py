"""Lexically constrained decoding: phrases the output must contain, in any order, by dynamic beam allocation (Post
and Vilar 2018, "Fast Lexically Constrained Decoding with Dynamic Beam Allocation for Neural Machine Translation",
NAACL), with the candidates arranged as in Hu et al. 2019 ("Improved Lexically Constrained Decoding for
Translation and Monolingual Rewriting", NAACL), whose vectorized version fairseq's `LexicallyConstrainedBeamSearch`
is. A search control (controls.py) with its own candidate selection (interface.py's `CandidateSelector`).

Legend: B batch (sentences), V vocabulary, K beams per sentence, N = B*K rows, P phrases (at most, per sentence),
C moves (at most, per automaton node), M candidates listed per sentence.

How:
- Each row follows its sentence's phrases with the automaton of phrases.py, the one definition of a phrase met
  (each once, on pieces of its own, in any order). The automata of a batch are flat tensors (`Automata`) and each
  row's state is two tensors, its node (N,) and the phrases it met (N, P), so that one step advances every row at
  once, with no Python loop over the rows.
- A row may end (EOS) only once every phrase is met: `mask` forbids EOS before. Given the sentences' maximum
  output lengths (`limits`), `mask` also keeps a row from ending at that length unmet: a row with exactly as many
  steps left as unmet constraint pieces may only advance a phrase, a row with fewer is dropped (-inf). The first
  phrase's forced pieces always stay possible, so a sentence whose phrases fit keeps a hypothesis that meets them.
- A phrase may be marked to end a word (a glossary term: its target is words, not the start of one): the piece after
  its last piece is then never one that continues a word (`continuations`, from the tokenizer: steering.py), so
  "Esther" is met as "Esther", never inside "Esthers" or "Estherher". A phrase is still met by its pieces alone
  (phrases.py); the rule only narrows the search's next piece where such a phrase was just met.
- `select` (Post & Vilar's step): the candidates of a sentence are the top 2K of its K x V extensions, each
  hypothesis's best next piece, and each hypothesis's pieces that advance an unmet phrase. A candidate's bank is
  the number of constraint pieces met once it is taken. Candidates are sorted by bank, then by score, and dealt
  round robin over the banks, from the fullest bank down (Hu et al.'s "stripes"), so every bank keeps places in the
  beam; beam search keeps the first K that are not EOS and finishes an EOS among the first K (search.py). This
  too runs on all the sentences with constraints at once (stable sorts: equal scores keep the order listed).
- A sentence without constraints gets the plain top 2K, unchanged.
- The banks share the beam, so K must be wider than for plain search (Post & Vilar: larger than the constraint
  pieces; they decode with beams of 10 to 20): the translator searches the sentences with constraints apart, with
  a beam of max(beam_size, decode.constraint_beam_size), or of decode.glossary_beam_size where the phrases are all
  glossary terms (translator.py's `constraint_beam`).
- Feasibility (whether the phrases fit the maximum output length, after the target prefix) is checked by the
  caller with `Phrases.fits`, which walks the prefix under the same budget as `mask` (steering.py): a sentence that
  passes it keeps a hypothesis. A search that still ends with none (repetition blocking forbade the only pieces
  left) is searched again with its controls relaxed (relaxation.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from transformer.decoding.candidates import top_candidates_and_best
from transformer.decoding.controls import RowSentences
from transformer.decoding.phrases import START, ConstraintState, Phrases

__all__ = ["START", "Automata", "ConstraintState", "LexicalConstraints", "Phrases"]

NEG_INF = float("-inf")
NO_LIMIT = 2**62  # the steps left of a sentence given no maximum length
LAST = 2**62  # a sort key after every stripe
MOVE_FIELDS = ("phrase", "piece", "next", "done", "full", "continues")


def _flat_moves(sets: Sequence[Phrases]) -> tuple[dict[str, list], dict[str, list]]:
    """The nodes and moves of every sentence's automaton, numbered through the batch (see `Automata`)."""
    nodes: dict[str, list] = {"root": [], "matched": [], "first": [], "count": [], "root_of": []}
    moves: dict[str, list] = {name: [] for name in MOVE_FIELDS}
    for phrases in sets:
        base = len(nodes["matched"])
        nodes["root"].append(base)
        for (_, m), steps in zip(phrases.nodes, phrases.steps):
            nodes["matched"].append(m)
            nodes["first"].append(len(moves["phrase"]))
            nodes["count"].append(len(steps))
            nodes["root_of"].append(base)
            for c, (i, length, piece) in enumerate(steps):
                done = length == len(phrases.phrases[i])
                after = base if done else base + phrases.node[i, length]
                move = (i, piece, after, done, length == m + 1, c == 0 and m > 0)
                for name, value in zip(MOVE_FIELDS, move):
                    moves[name].append(value)
    for name, value in zip(MOVE_FIELDS, (0, -1, 0, False, False, False)):  # one move no node lists: E >= 1
        moves[name].append(value)
    return nodes, moves


class Automata:
    """The phrase automata (phrases.py) of a batch's sentences as flat tensors, read for many rows at once.

    Nodes, G in all: sentence b's node n is `root[b] + n` (its `Phrases.nodes[n]`), with `matched` (G,) pieces
    matched and `root_of` (G,) its sentence's node 0. Moves, E in all: node g's are `count[g]` moves from `first[g]`,
    in the order tried (`Phrases.steps`): `phrase` (E,) the phrase (an index within its sentence), `piece` (E,),
    `next` (E,) the node after it, `done` (E,) it meets its phrase, `full` (E,) it adds a constraint piece to the bank,
    `continues` (E,) it continues the phrase in progress. Phrases, P at most per sentence: `lengths` (B, P) (0: no
    phrase), `starts` (B, P) their first pieces, `total` (B,) constraint pieces. A row's state is its node (N,) and
    which of its sentence's phrases it met (N, P) bool.
    """

    def __init__(self, sets: Sequence[Phrases], device: torch.device | str = "cpu") -> None:
        P = max([len(s.phrases) for s in sets] + [1])  # noqa: N806
        lengths = [[len(p) for p in s.phrases] + [0] * (P - len(s.phrases)) for s in sets]
        starts = [[p[0] for p in s.phrases] + [-1] * (P - len(s.phrases)) for s in sets]
        nodes, moves = _flat_moves(sets)
        as_tensor = lambda values, dtype=torch.long: torch.tensor(values, dtype=dtype, device=device)  # noqa: E731
        self.root, self.matched, self.first, self.count, self.root_of = (as_tensor(v) for v in nodes.values())
        self.phrase, self.piece, self.next = (as_tensor(moves[name]) for name in MOVE_FIELDS[:3])
        self.done, self.full, self.continues = (as_tensor(moves[name], torch.bool) for name in MOVE_FIELDS[3:])
        self.lengths, self.starts = as_tensor(lengths).view(len(sets), P), as_tensor(starts).view(len(sets), P)
        self.real = self.lengths > 0  # (B, P): the phrase exists
        self.total = self.lengths.sum(dim=1)  # (B,)
        self.width = max(nodes["count"] + [1])  # C, the most moves of a node

    def _moves(self, node: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """node (M,) -> its moves (M, C) (places in the move tensors) and which of them it has (M, C) bool."""
        offsets = torch.arange(self.width, device=node.device)  # (C,)
        moves = self.first[node][:, None] + offsets  # (M, C)
        return moves.clamp(max=self.piece.numel() - 1), offsets < self.count[node][:, None]

    def advance(self, node: torch.Tensor, met: torch.Tensor, piece: torch.Tensor):
        """`Phrases.advance` for many rows: node (M,), met (M, P) bool, piece (M,) -> the node and met after it."""
        moves, has = self._moves(node)  # (M, C) each
        takes = has & (self.piece[moves] == piece[:, None]) & ~met.gather(1, self.phrase[moves])  # (M, C)
        taken = moves.gather(1, takes.long().argmax(dim=1, keepdim=True)).squeeze(1)  # (M,) the first that takes
        hit = takes.any(dim=1)  # (M,)
        meets = (hit & self.done[taken])[:, None]  # (M, 1)
        met = met | torch.zeros_like(met).scatter_(1, self.phrase[taken][:, None], meets)  # (M, P)
        return torch.where(hit, self.next[taken], self.root_of[node]), met

    def bank(self, node: torch.Tensor, met: torch.Tensor, sentence: torch.Tensor) -> torch.Tensor:
        """`Phrases.bank` for many rows: (M,) long, the constraint pieces met."""
        return (met * self.lengths[sentence]).sum(dim=1) + self.matched[node]

    def advancing(self, node: torch.Tensor, met: torch.Tensor, sentence: torch.Tensor, vocab: int) -> torch.Tensor:
        """`Phrases.advancing` for many rows, as a mask (M, V) bool: the next piece of the phrase in progress, and the
        first pieces of unmet phrases that add a constraint piece (a full move into an unmet phrase)."""
        moves, has = self._moves(node)  # (M, C) each
        piece = self.piece[moves]  # (M, C)
        unmet = self.real[sentence] & ~met  # (M, P)
        opens = ((piece[:, :, None] == self.starts[sentence][:, None, :]) & unmet[:, None, :]).any(dim=2)  # (M, C)
        ok = has & self.full[moves] & ~met.gather(1, self.phrase[moves]) & (self.continues[moves] | opens)  # (M, C)
        keep = torch.zeros(node.numel(), vocab, dtype=torch.bool, device=node.device)  # (M, V)
        rows, places = ok.nonzero(as_tuple=True)
        keep[rows, piece[rows, places]] = True
        return keep


class LexicalConstraints(RowSentences):
    """Dynamic beam allocation over the rows of one batch (see the module docstring). constraints: B lists of
    phrases (each a list of target ids; an empty list: no constraints for that sentence); limits: the sentences'
    maximum output lengths (None: no budget). word_ends: B lists of one bool per phrase (missing: False), True for a
    phrase that must end a word (a glossary term), and continuations (V,) bool the pieces that continue a word: the
    piece after such a phrase's last piece is never one of them (`_end_words`)."""

    def __init__(
        self,
        constraints: Sequence[Sequence[Sequence[int]]],
        *,
        eos_id: int,
        limits: Sequence[int | None] | None = None,
        device: torch.device | str = "cpu",
        word_ends: Sequence[Sequence[bool]] | None = None,
        continuations: torch.Tensor | None = None,
    ) -> None:
        super().__init__(len(constraints), device)
        self.sets = [Phrases(phrases) for phrases in constraints]
        self.eos_id = eos_id
        self.automata = Automata(self.sets, device)
        limits = list(limits) if limits is not None else [None] * len(constraints)
        self.limits = torch.tensor([NO_LIMIT if n is None else n for n in limits], device=device)  # (B,)
        self.node = self.automata.root.clone()  # (N,) each row's node, after its history up to the last mask
        self.met = torch.zeros(len(constraints), self.automata.lengths.size(1), dtype=torch.bool, device=device)
        self.word_end, self.continuations = _word_ends(constraints, word_ends, continuations, self.met.shape, device)

    def moved(self, rows: torch.Tensor) -> None:
        rows = rows.to(self.node.device)
        self.node, self.met = self.node.index_select(0, rows), self.met.index_select(0, rows)

    def mask(self, log_probs: torch.Tensor, tokens: torch.Tensor, step: int) -> torch.Tensor:
        """Advances each row's state by its newest piece; after a phrase that must end a word, the pieces that
        continue it are -inf; EOS is -inf for the rows with a phrase unmet, and a row with just enough steps left for
        its unmet pieces may only advance them (none left: every piece -inf)."""
        automata, sentence = self.automata, self.sentence
        if step > 0:
            before = self.met
            self.node, self.met = automata.advance(self.node, self.met, tokens[:, -1].to(self.node.device))
            self._end_words(log_probs, before)
        unmet = (automata.real[sentence] & ~self.met).any(dim=1)  # (N,)
        log_probs[:, self.eos_id].masked_fill_(unmet, NEG_INF)
        need = automata.total[sentence] - automata.bank(self.node, self.met, sentence)  # (N,)
        left = self.limits[sentence] - step  # (N,)
        tight = (unmet & (need >= left)).nonzero().squeeze(1)  # (R,)
        if tight.numel():
            keep = automata.advancing(self.node[tight], self.met[tight], sentence[tight], log_probs.size(1))  # (R, V)
            keep &= (need[tight] == left[tight])[:, None]
            log_probs[tight] = log_probs[tight].masked_fill(~keep, NEG_INF)
        return log_probs

    def _end_words(self, log_probs: torch.Tensor, before: torch.Tensor) -> None:
        """The rows whose newest piece met a phrase that must end a word (met (N, P) now, `before` it): the pieces
        that would continue that word are -inf, so the phrase stands as whole words ("Esther", never "Esthers")."""
        if self.continuations is None:
            return
        ended = (self.met & ~before & self.word_end[self.sentence]).any(dim=1).nonzero()  # (R, 1)
        if ended.numel():
            log_probs[ended, self.continuations] = NEG_INF  # (R, W) places

    def select(self, log_probs: torch.Tensor, scores: torch.Tensor, k: int):
        """interface.py's `CandidateSelector.select`: log_probs (B, K, V), scores (B, K) -> values, where,
        priority (B, k); the sentences with constraints get Post & Vilar's allocation, the others the top k."""
        values, where, best = top_candidates_and_best(log_probs, scores, k)  # (B, k), (B, k), (B, K)
        B, K, V = log_probs.shape
        steered = self.automata.real[self.sentence.view(B, K)[:, 0]].any(dim=1).nonzero().squeeze(1)  # (B',)
        if steered.numel() == 0:
            return values, where, values.clone()
        rows = steered[:, None] * K + torch.arange(K, device=steered.device)  # (B', K) their hypotheses' rows
        if steered.numel() == B:  # every sentence has constraints: no copies
            candidates = self._candidates(rows, log_probs, scores, where - rows[:, :1] * V, best)
            return self._allocate(rows, *candidates, k=k, vocab=V)
        top, best = where[steered] - rows[:, :1] * V, best[steered]
        candidates = self._candidates(rows, log_probs[steered], scores[steered], top, best)
        priority = values.clone()  # (B, k)
        for out, chosen in zip((values, where, priority), self._allocate(rows, *candidates, k=k, vocab=V)):
            out[steered] = chosen.to(out.dtype)
        return values, where, priority

    def _candidates(self, rows, log_probs: torch.Tensor, scores: torch.Tensor, top: torch.Tensor, best: torch.Tensor):
        """The candidates of B' sentences (their hypotheses' rows (B', K), log_probs (B', K, V), scores (B', K), top
        (B', k) the top k's places in K x V, best (B', K) each hypothesis's best piece) in the order Post & Vilar's
        step lists them, M = k + K(P+2) places: the top k, then each hypothesis's best piece, the first pieces of its
        unmet phrases, the next piece of its phrase in progress. -> hypothesis, piece, score (B', M), and which
        places are candidates (B', M) bool: finite, and not listed before."""
        automata, (_, K, V) = self.automata, log_probs.shape
        node, met, sentence = self.node[rows], self.met[rows], self.sentence[rows]  # (B', K), (B', K, P), (B', K)
        starts = automata.starts[sentence].masked_fill(met, -1)  # (B', K, P): -1 once met
        following = automata.piece[automata.first[node]].masked_fill(automata.matched[node] == 0, -1)  # (B', K)
        extra = torch.cat([best[:, :, None], starts, following[:, :, None]], dim=2)  # (B', K, P+2)
        hyp = torch.arange(K, device=rows.device)[None, :, None].expand_as(extra)  # (B', K, P+2)
        hyp = torch.cat([top // V, hyp.flatten(1)], dim=1)  # (B', M)
        piece = torch.cat([top % V, extra.flatten(1)], dim=1)  # (B', M)
        listed = piece >= 0  # (B', M)
        piece = piece.clamp(min=0)
        score = log_probs.flatten(1).gather(1, hyp * V + piece) + scores.gather(1, hyp)  # (B', M)
        listed &= score > NEG_INF
        places = torch.arange(hyp.size(1), device=rows.device)  # (M,)
        key = torch.where(listed, hyp * V + piece, -1 - places)  # (B', M), unique where not listed
        order = key.sort(dim=1, stable=True).indices  # (B', M)
        ordered = key.gather(1, order)
        again = torch.zeros_like(listed)
        again[:, 1:] = ordered[:, 1:] == ordered[:, :-1]  # (B', M) listed before, in the sorted order
        return hyp, piece, score, listed & ~torch.zeros_like(listed).scatter_(1, order, again)

    def _allocate(self, rows: torch.Tensor, hyp, piece, score, listed, *, k: int, vocab: int):
        """The first k candidates dealt round robin over the banks, fullest first (Hu et al.'s stripes): a
        candidate's bank is its constraint pieces met once taken; within a bank, best score first, then the order
        listed. -> values, where (places in log_probs seen as (B*K*V,)) and priority (B', k); missing places are
        -inf at the sentence's first place."""
        B, M = hyp.shape  # noqa: N806 (B' sentences)
        V = vocab  # noqa: N806
        taken_rows = rows.gather(1, hyp).flatten()  # (B'*M,)
        node, met = self.automata.advance(self.node[taken_rows], self.met[taken_rows], piece.flatten())
        bank = self.automata.bank(node, met, self.sentence[taken_rows]).view(B, M).masked_fill(~listed, -1)
        by_score = score.masked_fill(~listed, NEG_INF).sort(dim=1, descending=True, stable=True).indices
        order = by_score.gather(1, bank.gather(1, by_score).sort(dim=1, descending=True, stable=True).indices)
        banks, position = bank.gather(1, order), torch.arange(M, device=hyp.device).expand(B, M)  # (B', M) each
        opens = torch.ones_like(listed)
        opens[:, 1:] = banks[:, 1:] != banks[:, :-1]  # (B', M) the first of its bank
        rank = position - torch.where(opens, position, 0).cummax(dim=1).values  # (B', M) place within its bank
        total = self.automata.total[self.sentence[rows[:, 0]]][:, None]  # (B', 1)
        stripe = (rank * (total + 1) + total - banks).masked_fill(~listed.gather(1, order), LAST)  # (B', M)
        chosen = order.gather(1, stripe.sort(dim=1, stable=True).indices[:, :k])  # (B', k) places, in stripe order
        taken = listed.gather(1, chosen)  # (B', k)
        first = rows[:, :1] * V  # (B', 1) the sentence's first place
        where = torch.where(taken, first + hyp.gather(1, chosen) * V + piece.gather(1, chosen), first)
        priority = torch.arange(k, 0, -1, dtype=score.dtype, device=score.device).expand(B, k)
        return score.gather(1, chosen).masked_fill(~taken, NEG_INF), where, priority.masked_fill(~taken, NEG_INF)


def _word_ends(constraints, word_ends, continuations, shape: torch.Size, device):
    """(B, P) bool: the phrases (in `Phrases`' order, empty ones left out) that must end a word, and the ids of the
    pieces that continue a word (W,) long; (None, None) where no phrase must."""
    ends = torch.zeros(shape, dtype=torch.bool)  # (B, P)
    for b, (phrases, flags) in enumerate(zip(constraints, word_ends or [])):
        kept = [bool(flag) for phrase, flag in zip(phrases, flags) if len(phrase)]
        ends[b, : len(kept)] = torch.tensor(kept, dtype=torch.bool)
    if continuations is None or not ends.any():
        return None, None
    return ends.to(device), continuations.to(device).nonzero().squeeze(1)
