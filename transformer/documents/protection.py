"""Protected spans as markup of a segment: what must not change is masked from the model and put back by alignment.

How: each span of a segment's text that spans.py finds (a placeholder, a URL, a number, ...), and each kept pair
(HTML code or `translate="no"`, a Markdown code span, which the model would otherwise read), becomes one `Atom`
whose raw text is the span as written and whose `protected` names its kind. The model never reads it: a sentence
goes to the model without it, and placement.py puts it back where inline markup goes, after the target word
aligned to the word before it (before the one aligned to the word after it, at a sentence's start). So each span
comes back exactly once, as written, whatever the model does to the words around it: it cannot drop, alter or
double what it never saw. Words of the translation equal to one of the segment's spans are the model's own
invention (the span was not in its input) and are removed (`drop_invented`), so a span is never doubled.

Why masking rather than a stand-in token that the model copies through: a model trained on ordinary text (the demo
model, an imported OPUS-MT model) has never seen such a token and garbles it (`%s` came back as "sh"); adding
pieces to the vocabulary needs every model retrained. Masking needs nothing of the model and is the one mechanism
the documents package already has for markup. Its price: the model reads the sentence with a gap where the span
was (docs/documents.md measures that ordinary text is not harmed).

A span restored "by position" is one with no aligned word beside it (no alignment: an ensemble; or its neighbours
unaligned): it went to the same relative place, as rendering.py guesses (`by_position`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from transformer.documents.layout import Layout
from transformer.documents.segments import Alignment, Atom, Char, Close, Open, Piece, Segment, raw
from transformer.documents.spans import Protection, find_spans


def protect_segment(segment: Segment, protection: Protection) -> Segment:
    """The segment with its protected spans and its kept pairs as protected `Atom`s (itself when there is none)."""
    if not protection.enabled:
        return segment
    pieces: list[Piece] = []
    run: list[str | Char] = []
    kept: list[Piece] = []  # a kept pair being collected, with what it holds
    depth = 0
    for piece in segment.pieces:
        if kept:
            kept.append(piece)
            depth += isinstance(piece, Open) - isinstance(piece, Close)
            if depth == 0:
                pieces.append(Atom("".join(raw(p) for p in kept), protected="code"))
                kept = []
        elif isinstance(piece, (str, Char)):
            run.append(piece)
        else:
            pieces += _protect_run(run, protection)
            run = []
            if isinstance(piece, Open) and piece.keep:
                kept, depth = [piece], 1
            else:
                pieces.append(piece)
    pieces += _protect_run(run, protection) + kept
    changed = len(pieces) != len(segment.pieces) or any(a is not b for a, b in zip(pieces, segment.pieces))
    return Segment(pieces, segment.escape, segment.info) if changed else segment


def _protect_run(run: list[str | Char], protection: Protection) -> list[Piece]:
    """A run of text pieces with each protected span of its text as one `Atom` (a span that starts or ends inside
    a `Char` of several characters takes all of it)."""
    units = [unit for piece in run for unit in _unit(piece)]
    text = "".join(t for t, _ in units)
    spans = find_spans(text, protection)
    if not spans:
        return list(run)
    starts, at = [], 0
    for t, _ in units:
        starts.append(at)
        at += len(t)
    out: list[Piece] = []
    done = 0
    for start, end, kind in spans:
        first = _unit_at(starts, start)
        last = _unit_at(starts, end - 1) + 1
        if first < done:
            continue
        out += _pieces(units[done:first])
        out.append(Atom("".join(raw(u) for _, u in units[first:last]), protected=kind))
        done = last
    return out + _pieces(units[done:])


def _unit(piece: str | Char) -> list[tuple[str, str | Char]]:
    return [(c, c) for c in piece] if isinstance(piece, str) else [(piece.text, piece)]


def _unit_at(starts: list[int], offset: int) -> int:
    return bisect.bisect_right(starts, offset) - 1


def _pieces(units: Sequence[tuple[str, str | Char]]) -> list[Piece]:
    """Units back to pieces: characters joined into strings, `Char`s as they are."""
    out: list[Piece] = []
    for _, unit in units:
        if isinstance(unit, str) and out and isinstance(out[-1], str):
            out[-1] += unit
        else:
            out.append(unit)
    return out


def protected_atoms(segment: Segment) -> list[Atom]:
    return [p for p in segment.pieces if isinstance(p, Atom) and p.protected]


def nothing_to_translate(layout: Layout) -> bool:
    """Whether a segment with protected spans has no word with a letter left (only spans, spaces, punctuation):
    it is written as it was, and the model is not asked."""
    return any(isinstance(u, Atom) and u.protected for u in layout.units) and not any(
        c.isalpha() for word in layout.texts for c in word
    )


def drop_invented(text: str, alignment: Alignment | None, spans: set[str]) -> tuple[str, Alignment | None]:
    """A translation without the segment's spans that the model wrote itself (see the module docstring): runs of
    words equal to a span, and a span inside a word (not part of a longer word or number); its alignment renumbered
    to the words kept."""
    words = text.split()
    if not spans or not any(span in text for span in spans):
        return text, alignment
    gone = [False] * len(words)
    for span in sorted((s for s in spans if len(s.split()) > 1), key=len, reverse=True):
        parts = span.split()
        for i in range(len(words) - len(parts) + 1):
            if words[i : i + len(parts)] == parts and not any(gone[i : i + len(parts)]):
                gone[i : i + len(parts)] = [True] * len(parts)
    inside = [_inside(span) for span in sorted(spans, key=len, reverse=True) if len(span.split()) == 1]
    for t, word in enumerate(words):
        for pattern in inside:
            word = pattern.sub("", word)
        gone[t] = gone[t] or not word
        words[t] = word
    kept = [t for t in range(len(words)) if not gone[t]]
    new = {t: n for n, t in enumerate(kept)}
    links = None if alignment is None else [(s, new[t]) for s, t in alignment if t in new]
    return " ".join(words[t] for t in kept), links


def _inside(span: str) -> re.Pattern:
    """A span within a word, where it is not part of a longer word or number."""
    before = r"(?<!\w)" if span[0].isalnum() or span[0] == "_" else ""
    after = r"(?!\w)" if span[-1].isalnum() or span[-1] == "_" else ""
    return re.compile(before + re.escape(span) + after)


def by_position(layout: Layout, ranges: Sequence[tuple[int, int]], alignments: Sequence[Alignment | None]) -> bool:
    """Whether some protected span of the segment had no aligned word beside it (module docstring)."""
    aligned: set[int] = set()
    for (a, _), links in zip(ranges, alignments):
        aligned |= {a + s for s, _ in links or ()}
    for u, unit in enumerate(layout.units):
        if isinstance(unit, Atom) and unit.protected:
            word = layout.word_of_unit.get(u)
            near = {word} if word is not None else {layout.separator_of(u) - 1, layout.separator_of(u)}
            if not near & aligned:
                return True
    return False
