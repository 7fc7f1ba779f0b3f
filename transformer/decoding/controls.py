"""Controls of the search: target prefixes and repetition blocking, and `Controls`, the one object through which
greedy decoding, beam search and sampling (search.py) call them all. Lexical constraints are in constraints.py.

Legend: B batch (sentences), V vocabulary, K beams per sentence, N = B*K rows, t tokens decoded so far.

Every control has the interface of interface.py's `SearchControl`: `mask(log_probs, tokens, step)` once per step,
after the model's `decode_step`, and the cache's moves `rerank_beams` / `keep_sentences`, forwarded as the
ensemble's cache forwards them. A control that chooses beam search's candidates itself (dynamic beam allocation)
also has `select` (`CandidateSelector`); at most one control of a search may. The search has no branch for any
particular control.

- `TargetPrefix`: each sentence's output starts with its given pieces (OpenNMT-py's and CTranslate2's
  `target_prefix`): while step < len(prefix), every token but the prefix's next is -inf and the prefix's keeps its
  log-probability, so a hypothesis's `log_prob` and score include the prefix's log-probability.
- `NoRepeatNgram`: no n-gram of output pieces appears twice in a hypothesis (fairseq's, Hugging Face's and
  CTranslate2's `no_repeat_ngram_size`): a token that would complete an n-gram already in the row's history is -inf.
  BOS is not part of the history it reads.
- `RepeatRunLimit`: no n-gram of output pieces more than `limit` times in a row, any n (`decode.max_ngram_repeats`,
  on by default): a token that would make the last `limit + 1` n-grams equal ("A A A", "ab ab ab") is -inf. The
  loop that a model falls into on input unlike its training data ("A A A A AMMMMMMM" for a heading in capitals)
  is cut where it starts; ordinary text hardly has such runs (4 of the 28,634 English verses of the bundled Bible
  training set, docs/decoding.md), where NoRepeatNgram forbids every repeated n-gram of its size.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from transformer.decoding.candidates import select_top
from transformer.decoding.interface import CandidateSelector, GraphableControl
from transformer.decoding.repeat_runs import repeat_run_ban

NEG_INF = float("-inf")


class RowSentences:
    """Which input sentence each row holds, moved as the cache moves its rows: the base of per-sentence controls.

    `sentence` (N,) long: row r holds sentence `sentence[r]` (an index into the lists the control was built with).
    Subclasses that keep more per-row state move it in `moved(rows)`.
    """

    def __init__(self, sentences: int, device: torch.device | str = "cpu") -> None:
        self.sentence = torch.arange(sentences, device=device)  # (N,) one row per sentence before the first move
        self.sentences = sentences  # B, sentences in the batch now
        self.beams = 1  # K rows per sentence

    def rerank_beams(self, rows: torch.Tensor) -> None:
        self.beams = rows.numel() // max(self.sentences, 1)
        self.sentence = self.sentence.index_select(0, rows.to(self.sentence.device))
        self.moved(rows)

    def keep_sentences(self, sentences: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        if rows is None:
            offsets = torch.arange(self.beams, device=sentences.device)  # (K,)
            rows = (sentences[:, None] * self.beams + offsets).view(-1)  # (B'*K,)
        self.sentences = sentences.numel()
        self.rerank_beams(rows)

    def moved(self, rows: torch.Tensor) -> None:
        """Row i took row `rows[i]`: move any other per-row state (nothing here)."""


class TargetPrefix(RowSentences):
    """Forces each sentence's output to start with its prefix pieces (an empty list: no prefix); see the module
    docstring. prefixes: B lists of target ids (no BOS)."""

    def __init__(self, prefixes: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> None:
        super().__init__(len(prefixes), device)
        self.longest = max((len(p) for p in prefixes), default=0)
        self.table = torch.full((len(prefixes), max(self.longest, 1)), -1, dtype=torch.long)  # (B, P), -1 = free
        for b, pieces in enumerate(prefixes):
            self.table[b, : len(pieces)] = torch.tensor(list(pieces), dtype=torch.long)
        self.table = self.table.to(device)

    def mask(self, log_probs: torch.Tensor, tokens: torch.Tensor, step: int) -> torch.Tensor:
        if step >= self.longest:
            return log_probs
        forced = self.table.index_select(0, self.sentence)[:, step : step + 1]  # (N, 1), -1 where free
        index = forced.clamp(min=0)  # (N, 1)
        only = torch.full_like(log_probs, NEG_INF).scatter_(1, index, log_probs.gather(1, index))  # (N, V)
        return torch.where(forced >= 0, only, log_probs)  # (N, V)


class NoRepeatNgram:
    """Forbids a token that would repeat an n-gram of the row's output pieces (see the module docstring); holds no
    state, the rows' histories are all it reads."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"no_repeat_ngram_size must be >= 1, got {n}")
        self.n = n

    def mask(self, log_probs: torch.Tensor, tokens: torch.Tensor, step: int) -> torch.Tensor:
        history = tokens[:, 1:]  # (N, t) without BOS
        n, t = self.n, history.size(1)
        if t < n:  # no complete n-gram yet
            return log_probs
        windows = history.unfold(1, n, 1)  # (N, t-n+1, n): every n-gram so far
        last = history[:, t - n + 1 :]  # (N, n-1): what the next token would complete
        repeats = (windows[:, :, : n - 1] == last[:, None, :]).all(dim=2)  # (N, t-n+1)
        rows, where = repeats.nonzero(as_tuple=True)
        log_probs[rows, windows[rows, where, n - 1]] = NEG_INF
        return log_probs

    def mask_static(self, log_probs: torch.Tensor, tokens: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """`mask` over a fixed buffer (interface.py's `GraphableControl`): every n-gram of the buffer compared,
        those not wholly written yet left out."""
        history, n = tokens[:, 1:], self.n  # (N, T) without BOS; the first `step` written
        windows = history.unfold(1, n, 1)  # (N, W, n): every n-gram of the buffer
        starts = torch.arange(windows.size(1), device=history.device)  # (W,)
        last = history.index_select(1, (step - n + 1 + torch.arange(n - 1, device=history.device)).clamp(min=0))
        repeats = (windows[:, :, : n - 1] == last[:, None, :]).all(dim=2) & (starts <= step - n)  # (N, W)
        return _forbid_where(log_probs, windows[:, :, n - 1], repeats)

    def rerank_beams(self, rows: torch.Tensor) -> None:
        pass

    def keep_sentences(self, sentences: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        pass


class RepeatRunLimit:
    """Forbids a token that would make some n-gram of the row's output pieces occur `limit + 1` times in a row (see
    the module docstring); holds no state. The rule itself is repeat_runs.py's, which the Hugging Face export ships."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"max_ngram_repeats must be >= 1, got {limit}")
        self.limit = limit

    def mask(self, log_probs: torch.Tensor, tokens: torch.Tensor, step: int) -> torch.Tensor:
        return repeat_run_ban(log_probs, tokens[:, 1:], self.limit)  # the history without BOS

    def mask_static(self, log_probs: torch.Tensor, tokens: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """`mask` over a fixed buffer (interface.py's `GraphableControl`): every lag the buffer could hold, those
        the `step` pieces written cannot complete left out. recent[j], the j-th piece back, is history[t - 1 - j]."""
        history, r = tokens[:, 1:], self.limit + 1  # (N, T) without BOS; the first t = `step` written
        N, T = history.shape
        lags = max((T + 1) // r, 1)  # L: every lag a buffer of T pieces could hold
        n = torch.arange(1, lags + 1, device=history.device)[:, None]  # (L, 1)
        k = torch.arange(max((r - 1) * lags - 1, 1), device=history.device)[None, :]  # (1, K)
        needed = k < (r - 1) * n - 1  # (L, K)
        back = lambda j: history.index_select(1, (step - 1 - j).clamp(0, T - 1).flatten())  # noqa: E731
        same = back(k + n).view(N, *needed.shape) == back(k[0])[:, None, :]  # (N, L, K)
        runs = (same | ~needed).all(dim=2) & (n[:, 0] * r <= step + 1)  # (N, L): the next piece would complete one
        return _forbid_where(log_probs, back(n[:, 0] - 1), runs)

    def rerank_beams(self, rows: torch.Tensor) -> None:
        pass

    def keep_sentences(self, sentences: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        pass


def _forbid_where(log_probs: torch.Tensor, pieces: torch.Tensor, forbid: torch.Tensor) -> torch.Tensor:
    """log_probs (N, V) with -inf at pieces[r, j] wherever forbid[r, j] ((N, W) each), in place, in fixed shapes."""
    hits = torch.zeros_like(log_probs).scatter_add_(1, pieces, forbid.to(log_probs.dtype))  # (N, V)
    return log_probs.masked_fill_(hits > 0, NEG_INF)


class Controls:
    """The controls of one search, called as one: `mask` runs each in turn, the moves reach each, and `select` is
    the one `CandidateSelector` among them or the plain top 2K (candidates.py). No controls: `mask` returns its
    input, so plain decoding pays one call per step."""

    def __init__(self, controls: Sequence = ()) -> None:
        self.controls = list(controls)
        selectors = [c for c in self.controls if isinstance(c, CandidateSelector)]
        if len(selectors) > 1:
            raise ValueError("at most one control of a search may choose the candidates")
        self.select = selectors[0].select if selectors else select_top

    def mask(self, log_probs: torch.Tensor, tokens: torch.Tensor, step: int) -> torch.Tensor:
        for control in self.controls:
            log_probs = control.mask(log_probs, tokens, step)
        return log_probs

    @property
    def graphable(self) -> bool:
        """Whether a search step captured as a CUDA graph can run these controls: each is a `GraphableControl` and
        none chooses the candidates."""
        return self.select is select_top and all(isinstance(c, GraphableControl) for c in self.controls)

    def mask_static(self, log_probs: torch.Tensor, tokens: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        for control in self.controls:
            log_probs = control.mask_static(log_probs, tokens, step)
        return log_probs

    def rerank_beams(self, rows: torch.Tensor) -> None:
        for control in self.controls:
            control.rerank_beams(rows)

    def keep_sentences(self, sentences: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        for control in self.controls:
            control.keep_sentences(sentences, rows)
