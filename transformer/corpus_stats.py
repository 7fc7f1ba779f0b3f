"""sacreBLEU's corpus scores over streams of lines, in the memory of one chunk of lines.

The statistics of every sacreBLEU metric add up over sentences: BLEU's n-gram matches and totals with the
hypothesis and closest-reference lengths, chrF's character (and word) n-gram matches and totals, TER's edits and
reference length. sacreBLEU's `corpus_score` extracts each sentence's statistics (`_extract_corpus_statistics`),
sums them sentence after sentence (`sacrebleu.utils.sum_of_lists`) and computes the score from the sums
(`_compute_score_from_stats`). `CorpusStats` does the same a chunk at a time, adding each chunk's sentences to the
running sums in the same order, so its score is sacreBLEU's own to the last bit (tests/test_corpus_stats.py) while
memory holds one chunk of lines, whatever the length of the files.

Paired significance tests resample sentences, so for them `CorpusStats(per_sentence=True)` also keeps each
sentence's statistics (numbers, not the text): per line, system and metric 10 numbers for BLEU (2 lengths, 4 n-gram
matches, 4 n-gram totals), 18 for chrF (3 per character n-gram order, 6 orders; 24 for chrF++) and 2 for TER;
`paired_test` hands them to sacreBLEU's own `PairedTest`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from sacrebleu.utils import sum_of_lists

from transformer.errors import UserError

_END = object()


def aligned_lines(streams: Sequence[Iterable[str]], names: Sequence[str]) -> Iterator[tuple[str, ...]]:
    """The streams read in step: one tuple (a line of each) per line. A stream that ends before another is a
    `UserError` naming both and their lengths (the rest of the longer one is counted, not kept)."""
    iterators, count = [iter(stream) for stream in streams], 0
    while True:
        row = [next(it, _END) for it in iterators]
        ended = [line is _END for line in row]
        if all(ended):
            return
        if any(ended):
            short, long = ended.index(True), ended.index(False)
            total = count + 1 + sum(1 for _ in iterators[long])
            raise UserError(
                f"{names[short]} has {count} lines but {names[long]} has {total}; they must be "
                "line-aligned, one sentence per line"
            )
        count += 1
        yield tuple(row)


def chunks(rows: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Lists of up to `size` consecutive items of `rows`, read lazily."""
    rows = iter(rows)
    while chunk := list(itertools.islice(rows, size)):
        yield chunk


class CorpusStats:
    """One sacreBLEU metric's statistics for one system, summed chunk by chunk; `score()` is its corpus score.

    prepare: applied to every hypothesis and reference line first (the paper-style tokenized BLEU's tokenizer).
    """

    def __init__(self, metric: Any, *, per_sentence: bool = False, prepare: Callable[[str], str] | None = None):
        self.metric, self.prepare = metric, prepare
        self.totals: list[Any] | None = None
        self.sentences: list[list[Any]] | None = [] if per_sentence else None
        # sacreBLEU's BLEU warns when 100 hypotheses end in " ." (tokenized output); it would warn once per chunk
        # here, so its warning is turned off and the count kept for the whole stream: the caller warns once
        if not hasattr(metric, "_force_as_given"):  # the metric may be shared by several systems' CorpusStats
            metric._force_as_given, metric._force = metric._force, True
        self.count_periods, self.tokenized_periods = not metric._force_as_given, 0

    def add(self, hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> None:
        """One chunk: `references` holds one sequence per reference stream, each line-aligned with `hypotheses`."""
        if self.prepare is not None:
            hypotheses = [self.prepare(line) for line in hypotheses]
            references = [[self.prepare(line) for line in stream] for stream in references]
        if self.count_periods:
            self.tokenized_periods += sum(line.endswith(" .") for line in hypotheses)
        stats = self.metric._extract_corpus_statistics(hypotheses, references)
        self.totals = sum_of_lists(stats if self.totals is None else [self.totals, *stats])  # sacreBLEU's order
        if self.sentences is not None:
            self.sentences += stats

    def clear_caches(self) -> None:
        """Empty the caches of sacreBLEU's tokenizers (`functools.lru_cache`s of 65,536 lines, shared by all
        instances: about 40 MB for BLEU's 13a once full). Called after each chunk, memory stays that of a chunk."""
        tokenizer = getattr(self.metric, "tokenizer", None)
        parts = (tokenizer, *getattr(tokenizer, "__dict__", {}).values())  # the 13a tokenizer holds a regexp one
        for cls in {cls for part in parts for cls in type(part).__mro__}:
            clear = getattr(vars(cls).get("__call__"), "cache_clear", None)
            if clear is not None:
                clear()

    def score(self) -> Any:
        """sacreBLEU's score object (BLEUScore, CHRFScore, TERScore) of everything added."""
        return self.metric._compute_score_from_stats(self.totals)


class _Sentences:
    """A system as sacreBLEU's `PairedTest` sees it through `_Recorded`: per metric, its sentences' statistics."""

    def __init__(self, stats: dict[str, list[list[Any]]]) -> None:
        self.stats = stats

    def __len__(self) -> int:
        return len(next(iter(self.stats.values())))


class _Recorded:
    """A sacreBLEU metric whose `_extract_corpus_statistics` returns the statistics recorded in a `_Sentences`
    instead of extracting them from text again; everything else is the metric's own."""

    def __init__(self, metric: Any, key: str) -> None:
        self._metric, self._key = metric, key

    def _extract_corpus_statistics(self, hypotheses: _Sentences, references: None) -> list[list[Any]]:
        return hypotheses.stats[self._key]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._metric, name)


def paired_test(systems: dict[str, dict[str, CorpusStats]], *, test_type: str, n_samples: int):
    """sacreBLEU's `PairedTest` ("bs" or "ar") of every system against the first, on the per-sentence statistics
    (`CorpusStats(per_sentence=True)`, metric key -> stats for each system name). Returns (the number of samples,
    the signatures and the results table, as `PairedTest()` returns them)."""
    from sacrebleu.significance import PairedTest

    named = [(name, _Sentences({key: s.sentences for key, s in stats.items()})) for name, stats in systems.items()]
    metrics = {key: _Recorded(s.metric, key) for key, s in next(iter(systems.values())).items()}
    test = PairedTest(named, metrics, references=None, test_type=test_type, n_samples=n_samples)
    return test.n_samples, *test()
