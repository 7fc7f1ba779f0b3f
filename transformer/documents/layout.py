"""A segment's words and what stands between them: the source side of tag placement.

The pieces are flattened into units (one per character, `Char` or markup piece). A word is a run of characters that
are not whitespace, uninterrupted by a `Break` or a separating `Atom`; markup strictly inside a run belongs to the
word (`<b>un</b>true`), markup at its edges to the separators around it, except a protected span glued to the word
(`%s:` is the word `:` holding the atom `%s`), which goes with it. So a segment reads

    separator 0, word 0, separator 1, word 1, ..., word n-1, separator n

and the model reads the words joined by single spaces, as the project's alignments count them (whitespace-split
words). `Span`s are the `Open`/`Close` pairs, with the words they hold; `owner` is the innermost span around a unit.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformer.documents.segments import Atom, Break, Char, Close, Open, Piece, Segment, raw


@dataclass
class Span:
    """An `Open`/`Close` pair: its units, its words (first, last; None when it holds none) and its parent span."""

    index: int  # in source order
    open: int  # unit index of the Open
    close: int  # unit index of the Close
    parent: int | None
    depth: int
    words: tuple[int, int] | None = None

    def holds(self, unit: int) -> bool:
        return self.open < unit < self.close


class Layout:
    """Units, words, separators and spans of one segment (see the module docstring)."""

    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.units: list[Char | Open | Close | Atom | Break] = _units(segment.pieces)
        self.words: list[tuple[int, int]] = _words(self.units)  # unit ranges [start, end)
        self.texts = ["".join(u.text for u in self.units[a:b] if isinstance(u, Char)) for a, b in self.words]
        self.spans, self.owner = _spans(self.units)
        starts = [a for a, _ in self.words]
        for span in self.spans:
            inside = [w for w, (a, b) in enumerate(self.words) if a < span.close and span.open < b]  # overlapping
            span.words = (inside[0], inside[-1]) if inside else None
        self.word_of_unit = {u: w for w, (a, b) in enumerate(self.words) for u in range(a, b)}
        self._starts = starts

    def separator(self, k: int) -> range:
        """Unit indices of separator k (0: before the first word; len(words): after the last)."""
        start = self.words[k - 1][1] if k > 0 else 0
        end = self.words[k][0] if k < len(self.words) else len(self.units)
        return range(start, end)

    def separator_of(self, unit: int) -> int:
        """The separator a unit outside every word lies in: the number of words that start before it."""
        lo, hi = 0, len(self._starts)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._starts[mid] < unit:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def is_space(self, k: int) -> bool:
        """Whether separator k is one plain space, the model's own way of parting words."""
        units = [self.units[u] for u in self.separator(k)]
        return len(units) == 1 and isinstance(units[0], Char) and units[0].raw == " "

    def required(self, k: int) -> bool:
        return any(isinstance(self.units[u], Break) and self.units[u].required for u in self.separator(k))

    def breaks_line(self, k: int) -> bool:
        """Whether separator k holds a line break or a separating atom: a safe place to cut a long sentence."""
        units = [self.units[u] for u in self.separator(k)]
        return any(_parts_words(u) and not (isinstance(u, Char) and "\n" not in u.text) for u in units)

    def raw_between(self, start: int, end: int) -> str:
        """Units start..end-1 as written."""
        return "".join(raw(u) for u in self.units[start:end])


def _units(pieces: list[Piece]) -> list:
    units = []
    for piece in pieces:
        if isinstance(piece, str):
            units.extend(Char(c, c) for c in piece)
        else:
            units.append(piece)
    return units


def _parts_words(unit) -> bool:
    """Whether a unit parts words: whitespace, a Break, a separating Atom."""
    if isinstance(unit, Char):
        return unit.text.isspace()
    return isinstance(unit, Break) or (isinstance(unit, Atom) and unit.separates)


def _words(units: list) -> list[tuple[int, int]]:
    words, start, last = [], None, None
    for i, unit in enumerate(units):
        if isinstance(unit, Char) and not _parts_words(unit):
            start = i if start is None else start
            last = i
        elif _parts_words(unit) and start is not None:
            words.append((start, last + 1))
            start = None
    if start is not None:
        words.append((start, last + 1))
    return [_with_glued(units, a, b) for a, b in words]


def _with_glued(units: list, start: int, end: int) -> tuple[int, int]:
    """A word's range widened over the protected atoms glued to it (`%s:` is the word `:` holding `%s`)."""
    while start > 0 and isinstance(units[start - 1], Atom) and units[start - 1].protected:
        start -= 1
    while end < len(units) and isinstance(units[end], Atom) and units[end].protected:
        end += 1
    return start, end


def _spans(units: list) -> tuple[list[Span], dict[int, int | None]]:
    """The Open/Close pairs in source order, and each unit's innermost span (None: none)."""
    spans: list[Span] = []
    stack: list[int] = []
    owner: dict[int, int | None] = {}
    for i, unit in enumerate(units):
        if isinstance(unit, Close):
            spans[stack.pop()].close = i
        owner[i] = stack[-1] if stack else None
        if isinstance(unit, Open):
            spans.append(Span(len(spans), i, -1, owner[i], len(stack)))
            stack.append(len(spans) - 1)
    return spans, owner
