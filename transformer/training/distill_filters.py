"""The filters of a distilled corpus: the teacher's outputs that distillation recipes drop, each pair counted.

Each filter is a setting of `config.DistillConfig`; a pair goes through them in the order of `FILTERS` and is
counted under the first that drops it:

    empty          the teacher's output is empty (drop_empty); a pair with an empty source is always dropped (there
                   is nothing to learn from it, and readers strip a TSV line, so a row cannot start empty)
    copy           the output equals the source, an untranslated copy (drop_copies)
    length_ratio   output words per source word below min_length_ratio or above max_length_ratio (0 = that bound
                   off): truncated outputs and hallucinated loops; words are whitespace-separated
    score          the teacher's log-probability per piece below min_score (None = off): outputs it was unsure of

`filter_corpus` streams teacher.tsv (distill_chunks.py's rows) into distilled.tsv, the kept rows unchanged, and
returns the report written to filters.json: pairs read, kept, dropped per filter, the settings, and a histogram of
the teacher's scores per piece (to choose min_score: the lower edge of each bin of width `SCORE_BIN`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from transformer.config import DistillConfig
from transformer.errors import UserError
from transformer.fileio import atomic_output, utf8_lines

FILTERS = ("empty", "copy", "length_ratio", "score")
SCORE_BIN = 0.5  # width of the score histogram's bins (log-probability per piece)
SCORE_FLOOR = -10.0  # scores below this share the histogram's lowest bin


def drop_reason(source: str, output: str, score: float, settings: DistillConfig) -> str | None:
    """The first filter of `FILTERS` that drops this pair, or None when it is kept."""
    if not source.strip():
        return "empty"
    if not output.strip():
        return "empty" if settings.drop_empty else None  # no words to compare: the other filters do not apply
    if settings.drop_copies and output.strip() == source.strip():
        return "copy"
    ratio = len(output.split()) / len(source.split())
    low, high = settings.min_length_ratio, settings.max_length_ratio
    if (low and ratio < low) or (high and ratio > high):
        return "length_ratio"
    if settings.min_score is not None and score < settings.min_score:
        return "score"
    return None


def _fields(line: str, path: Path, number: int) -> tuple[str, str, float]:
    """(source, output, score) of one row of teacher.tsv; a row of another shape is a `UserError` naming it."""
    fields = line.split("\t")
    try:
        if len(fields) != 4:
            raise ValueError
        return fields[0], fields[1], float(fields[3])
    except ValueError:
        raise UserError(
            f"{path} line {number} is not a row of the teacher's translation (source, output, target, score); "
            "rerun the translate stage"
        ) from None


def score_bin(score: float) -> str:
    """The histogram bin of a score per piece: its lower edge, e.g. '-1.5' for -1.2."""
    edge = max(SCORE_FLOOR, min(0.0, math.floor(score / SCORE_BIN) * SCORE_BIN))
    return f"{edge + 0.0:.1f}"  # + 0.0: -0.0 is 0.0


def filter_corpus(teacher: Path, distilled: Path, settings: DistillConfig) -> dict[str, Any]:
    """Stream `teacher` (rows of distill_chunks.py) into `distilled` (atomically) without the pairs the filters
    drop; returns the report (see the module docstring)."""
    dropped = dict.fromkeys(FILTERS, 0)
    histogram: dict[str, int] = {}
    pairs = 0
    with open(teacher, "rb") as rows, atomic_output(distilled) as out:
        for number, line in enumerate(utf8_lines(rows, teacher), start=1):
            source, output, score = _fields(line, teacher, number)
            pairs += 1
            bin_ = score_bin(score)
            histogram[bin_] = histogram.get(bin_, 0) + 1
            reason = drop_reason(source, output, score, settings)
            if reason:
                dropped[reason] += 1
            else:
                out.write(line + "\n")
    histogram = dict(sorted(histogram.items(), key=lambda item: float(item[0])))
    settings_used = {k: getattr(settings, k) for k in ("drop_empty", "drop_copies", "min_length_ratio")}
    settings_used |= {"max_length_ratio": settings.max_length_ratio, "min_score": settings.min_score}
    return {
        "pairs": pairs,
        "kept": pairs - sum(dropped.values()),
        "dropped": dropped,
        "settings": settings_used,
        "score_histogram": histogram,
    }
