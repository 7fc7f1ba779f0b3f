"""The target text of a segment laid out, before its markup is placed (placement.py places it).

For each sentence, the model's words are written with the model's own spacing, except that:
- a separator of the source that is more than one space (a line break, an indentation, a `Break`, markup between
  the words) goes, as written, where the model put a space after the target word aligned to the word before it
  (the last such word, when several are aligned); one separator per target space, so a line break that finds its
  place taken is left out, and with it only whitespace. `Break(required=True)` (cue boundaries) are never left
  out: they keep their order and, where the target has enough words, at least one word between two of them;
- a target word equal to a source word aligned to it is written as that source word was (its entities and escapes,
  and markup inside it: `un<b>true</b>` stays so); another is the model's text, escaped for the format;
- the separators between sentences (and around the segment) are kept as written, in place.

`Rendering.text` is that layout as a list of strings; `home[unit]` is where a markup unit of the source stands in it
when it was written in place (in a separator kept, or inside a word written as the source's), and `word_at[t]` the
range of target word t. Word indices are global over the segment: sentence i's words follow sentence i-1's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from transformer.documents.layout import Layout
from transformer.documents.segments import Alignment, Break, Char

NEAR = 2  # how far (in source words) an aligned word may stand from unaligned ones to guess where they went


def target_words(text: str) -> tuple[list[str], list[str]]:
    """The whitespace-split words of a translation (as the alignments count them) and the whitespace before each
    (the first's is '')."""
    words, spaces, space, word = [], [], "", ""
    for char in text:
        if char.isspace():
            if word:
                words.append(word)
                word = ""
            space += char
        else:
            if not word:
                spaces.append(space if words else "")
                space = ""
            word += char
    if word:
        words.append(word)
    return words, spaces


class Links:
    """Word links of a segment's sentences over global indices, with a proportional guess for unaligned words."""

    def __init__(self, ranges: Sequence[tuple[int, int]], counts: Sequence[int], alignments) -> None:
        self.ranges, self.counts = list(ranges), list(counts)
        self.offsets = [sum(self.counts[:i]) for i in range(len(self.counts))]
        self.targets: dict[int, list[int]] = defaultdict(list)
        self.sources: dict[int, list[int]] = defaultdict(list)
        self.sentence = {w: i for i, (a, b) in enumerate(self.ranges) for w in range(a, b)}
        for i, ((a, b), m, links) in enumerate(zip(self.ranges, self.counts, alignments)):
            for s, t in sorted(set(links or ())):
                if 0 <= s < b - a and 0 <= t < m:
                    self.targets[a + s].append(self.offsets[i] + t)
                    self.sources[self.offsets[i] + t].append(a + s)

    def project(self, word: int) -> int | None:
        """The target word at the same relative place in its sentence (None: the translation is empty)."""
        i = self.sentence[word]
        (a, b), m = self.ranges[i], self.counts[i]
        return None if m == 0 else self.offsets[i] + min(m - 1, (word - a) * m // (b - a))

    def anchor(self, word: int) -> int | None:
        """The last target word aligned to `word`, or its proportional guess."""
        found = self.targets.get(word)
        return max(found) if found else self.project(word)

    def span(self, first: int, last: int) -> list[int]:
        """The target words aligned to source words first..last (their guess when none is)."""
        found = sorted({t for w in range(first, last + 1) for t in self.targets.get(w, ())})
        return found or self.guess(first, last)

    def guess(self, first: int, last: int) -> list[int]:
        """Target words for source words first..last of which none is aligned. Next to an aligned word (at most
        one unaligned word between): as many words as they are from just after the target word aligned to the one
        before them (up to just before the one aligned to the one after them), else just before the latter. Else
        (a long unaligned stretch, a sentence translated short), the words at the same relative places (`project`)."""
        i = self.sentence[first]
        (a, b), m, offset = self.ranges[i], self.counts[i], self.offsets[i]
        if m and self.sentence[last] == i:
            before = next((w for w in range(first - 1, max(a, first - NEAR) - 1, -1) if self.targets.get(w)), None)
            after = next((w for w in range(last + 1, min(b, last + NEAR + 1)) if self.targets.get(w)), None)
            left = max(self.targets[before]) if before is not None else None
            right = min(self.targets[after]) if after is not None else None
            size = last - first + 1
            if left is not None and left + 1 < offset + m:
                end = min(offset + m, left + 1 + size, right if right is not None and right > left + 1 else offset + m)
                return list(range(left + 1, end))
            if right is not None and right > offset:
                return list(range(max(offset, right - size), right))
        return sorted({t for t in (self.project(first), self.project(last)) if t is not None})


def assign_separators(layout: Layout, links: Links, i: int) -> dict[int, list[int]]:
    """{target gap g of sentence i (1..m-1: before its word g; m: after its last): the source separators written
    there}, as the module docstring says."""
    (a, b), m, offset = links.ranges[i], links.counts[i], links.offsets[i]
    wanted = {}
    for k in range(a + 1, b):
        if not layout.is_space(k):
            anchor = links.anchor(k - 1)
            wanted[k] = m if anchor is None else anchor - offset + 1
    placed: dict[int, list[int]] = defaultdict(list)
    required = [k for k in wanted if layout.required(k)]
    last = 0
    for n, k in enumerate(required):
        room = (m - 1) - (len(required) - n - 1)  # leave a gap for each one still to come
        g = min(max(wanted[k], last + 1), room) if last + 1 <= room else min(max(last, 1), m)
        placed[g].append(k)
        last = g
    for k, g in wanted.items():
        if k not in required and 1 <= g <= m - 1 and g not in placed:
            placed[g].append(k)
    return placed


class Rendering:
    """The target layout of one segment (module docstring)."""

    def __init__(self, layout: Layout, ranges, translations: Sequence[tuple[str, Alignment | None]]) -> None:
        self.layout = layout
        self.targets = [target_words(text) for text, _ in translations]
        self.links = Links(ranges, [len(words) for words, _ in self.targets], [a for _, a in translations])
        self.text: list[str] = []
        self.origin: list[int | None] = []  # per entry of `text`: the source unit it was written from, or None
        self.home: dict[int, int] = {}
        self.word_at: list[tuple[int, int]] = []
        self.from_source: dict[int, int] = {}  # target word -> the source word written in its place
        self.sentence_at: list[int] = []
        self.walls: list[int] = []  # target words that a required separator stands before
        self.required_at: dict[int, int] = {}  # unit of a required Break -> where it starts in `text`
        self._write()

    def _units(self, units: range) -> None:
        for u in units:
            unit = self.layout.units[u]
            if isinstance(unit, (Char, Break)):
                if isinstance(unit, Break) and unit.required:
                    self.required_at[u] = len(self.text)
                self._append(unit.raw, u)
            else:
                self.home[u] = len(self.text)

    def _write(self) -> None:
        layout, links = self.layout, self.links
        self._units(layout.separator(0))
        for i, (_, b) in enumerate(links.ranges):
            words, spaces = self.targets[i]
            placed = assign_separators(layout, links, i)
            self.sentence_at.append(len(self.text))
            for j, word in enumerate(words):
                if j and not placed.get(j):
                    self._append(spaces[j])
                self._separators(placed.get(j, ()), links.offsets[i] + j)
                self._word(links.offsets[i] + j, word)
            self._separators(placed.get(len(words), ()), links.offsets[i] + len(words))
            self._units(layout.separator(b))

    def _separators(self, separators: Sequence[int], before: int) -> None:
        for k in separators:
            if self.layout.required(k):
                self.walls.append(before)
            self._units(self.layout.separator(k))

    def _word(self, t: int, word: str) -> None:
        start = len(self.text)
        same = [s for s in self.links.sources.get(t, ()) if self.layout.texts[s] == word]
        if same:
            self.from_source[t] = same[0]
            self._units(range(*self.layout.words[same[0]]))
        else:
            self._append(self.layout.segment.escape(word))
        self.word_at.append((start, len(self.text)))

    def _append(self, text: str, unit: int | None = None) -> None:
        self.text.append(text)
        self.origin.append(unit)

    def before(self, t: int) -> int:
        """Where the separator before target word t starts (the end of word t-1; 0 for the first)."""
        return self.word_at[t - 1][1] if t > 0 else 0

    def after(self, t: int) -> int:
        """Where the separator after target word t ends (the start of word t+1; the end for the last)."""
        return self.word_at[t + 1][0] if t + 1 < len(self.word_at) else len(self.text)
