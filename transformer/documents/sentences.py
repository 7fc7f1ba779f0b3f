"""A segment's words cut into sentences, and sentences too long for the model cut at safe points.

Sentences come from sentencex (Wikimedia's rule-based splitter: abbreviations and punctuation of some 240
languages, with fallbacks between related ones; pure Python, no model to download), run over the words joined by
single spaces. A cut always falls between words, so a sentence is a range of words and the separator between two
sentences is kept as written. A sentence that the model cannot take whole (`fits` false) is cut in two at the best
safe point near its middle (a line break or cue boundary first, then a word ending in , ; : ) and the like, else
the middle), again until each piece fits or is one word: nothing is truncated and nothing dropped.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable

SOFT_ENDS = (",", ";", ":", ")", "]", "}", "»", "”", '"', "'", "—", "–", "-", "،", "、", "，", "；", "：")


def sentence_starts(words: list[str], language: str) -> list[int]:
    """The indices of the words that start a sentence (always 0 when there are words)."""
    if not words:
        return []
    from sentencex import segment

    text = " ".join(words)
    offsets = list(itertools.accumulate((len(word) + 1 for word in words[:-1]), initial=0))  # each word's start
    starts, position = [0], 0
    for piece in segment(language, text):
        start = text.find(piece.strip(), position) if piece.strip() else -1
        if start < 0:
            continue
        position = start + len(piece.strip())
        word = bisect.bisect_left(offsets, start)  # the first word starting at or after it
        if word < len(words) and word > starts[-1]:
            starts.append(word)
    return starts


def sentence_ranges(
    words: list[str], language: str, fits: Callable[[str], bool], safe: Callable[[int], int]
) -> list[tuple[int, int]]:
    """Word ranges [start, end) that cover `words` in order: sentences, each cut until it fits the model.

    safe(k): how good a cut before word k is (2: a line break there, 1: word k-1 ends in a soft punctuation, 0)."""
    starts = sentence_starts(words, language)
    ranges = []
    for start, end in zip(starts, starts[1:] + [len(words)]):
        ranges += fitted(words, start, end, fits, safe)
    return ranges


def fitted(
    words: list[str], start: int, end: int, fits: Callable[[str], bool], safe: Callable[[int], int]
) -> list[tuple[int, int]]:
    """[start, end) as it is when it fits (or is one word), else cut at `cut_point` and each half fitted."""
    todo, done = [(start, end)], []
    while todo:
        a, b = todo.pop()
        if b - a <= 1 or fits(" ".join(words[a:b])):
            done.append((a, b))
            continue
        cut = cut_point(a, b, safe)
        todo += [(cut, b), (a, cut)]  # the first half is taken next
    return done


def cut_point(start: int, end: int, safe: Callable[[int], int]) -> int:
    """The cut before word k (start < k < end): the safest, then the nearest the middle, in the middle half if any
    safe point lies there."""
    middle = (start + end) / 2
    candidates = range(start + 1, end)
    quarter = (end - start) / 4
    near = [k for k in candidates if abs(k - middle) <= quarter] or list(candidates)
    return max(near, key=lambda k: (safe(k), -abs(k - middle)))


def soft_end(word: str) -> bool:
    return word.endswith(SOFT_ENDS) or word.endswith((".", "!", "?"))
