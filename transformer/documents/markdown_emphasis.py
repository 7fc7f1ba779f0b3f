"""Markdown's emphasis kept as emphasis once placed: markdown_doc.py's last pass over a segment's target pieces.

CommonMark reads `*`, `**`, `_`, `__` (and `~~`) as emphasis only where they flank words: an opening run not
followed by whitespace, a closing one not preceded by it; and markers of one character that touch are one run
(`**a***b*` is not `**a**` then `*b*`). Placed by alignment, a marker can stand beside a space (where a separator
kept in place holds it) or touch another pair's marker of its character (two pairs around the same words, one
within the other: `*`+`*` around "a" is `**a**`, strong). So, over the placed pieces:
- each marker of emphasis or of a link moves to the word side of the whitespace beside it (the pair still holds
  the same words), past a line break whole (its `\\` or the next line's `> `);
- a pair whose marker touches a marker of its own character is written with the other one (`*` as `_`, `**` as
  `__`, or back), both its markers, where the other character touches none and no marker stands within a word
  (`_` neither opens nor closes inside a word, `_a_b`).
Then markdown-it reads the result as a document: where it reads fewer of a kind (em, strong, s, link) than in
the source, pairs are written with the other character one at a time while that helps. What still does not parse
is logged: three pairs of one kind around one word that starts or ends with punctuation (`_*_(so_*_`), nested
strikethrough at a line's start (`~~~~` opens a code fence). The pairs' objects are the source's, or copies of
them with the other character.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from transformer.documents.segments import Close, Open, Piece, raw

log = logging.getLogger(__name__)

OTHER = {"*": "_", "**": "__", "_": "*", "__": "**"}  # the same emphasis, written with the other character
TIGHT = ("*", "_", "~", "[", "]")  # the markers moved to the word side of whitespace (emphasis, strikethrough, links)


def settle_emphasis(source: Sequence[Piece], pieces: list[Piece]) -> list[Piece]:
    """The target pieces of a Markdown segment with its emphasis made to parse (see the module docstring)."""
    out = _alternate(_tighten(list(pieces)))
    wanted = parsed_kinds(source)
    found = parsed_kinds(out)
    if found == wanted:
        return out
    out, found = _search(out, wanted, found)
    if found != wanted:
        lost = ", ".join(f"{n} {kind}" for kind, n in sorted((wanted - found).items()))
        log.warning("Markdown: %s no longer read as such in %r", lost, "".join(raw(p) for p in out)[:60])
    return out


def parsed_kinds(pieces: Sequence[Piece]) -> Counter:
    """How many of each of em, strong, s and link markdown-it reads in the pieces' text, read as a document of its
    own (so that a line the text would start otherwise, a code fence of `~~~`, counts too), each line break without
    what the next line starts with in the source (a quote's `> `, which markdown-it reads as the block's)."""
    text = "".join(_without_prefix(raw(piece)) for piece in pieces)
    blocks = _parser().parse(text)
    tokens = [child for block in blocks for child in block.children or []]
    return Counter(t.type[:-5] for t in tokens if t.type in ("em_open", "strong_open", "s_open", "link_open"))


def _without_prefix(text: str) -> str:
    return text[: text.index("\n") + 1] if _line_break(text) else text


@functools.cache
def _parser():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable(["strikethrough"])


def _search(pieces: list[Piece], wanted: Counter, found: Counter) -> tuple[list[Piece], Counter]:
    """Pairs' characters flipped one at a time, each flip kept where more of `wanted` is read, until none helps."""
    pairs = [(i, j) for i, j in sorted(_partners(pieces).items()) if pieces[i].raw in OTHER]
    better = True
    while better:
        better = False
        for i, j in pairs:
            trial = list(pieces)
            trial[i], trial[j] = _flipped(pieces[i]), _flipped(pieces[j])
            kinds = parsed_kinds(trial)
            if _score(kinds, wanted) > _score(found, wanted):
                pieces, found, better = trial, kinds, True
    return pieces, found


def _score(found: Counter, wanted: Counter) -> int:
    return sum((found & wanted).values()) - sum((found - wanted).values())


def _tight(piece: Piece) -> bool:
    return isinstance(piece, (Open, Close)) and piece.raw[:1] in TIGHT


def _tighten(pieces: list[Piece]) -> list[Piece]:
    """Whitespace after an opening marker moved before it, and before a closing marker moved after it; a line break
    (`_line_break`) moves whole."""
    out = [piece for piece in pieces if piece != ""]
    moved = True
    while moved:
        moved = False
        for i in range(len(out) - 1):
            a, b = out[i], out[i + 1]
            if isinstance(a, Open) and _tight(a) and isinstance(b, str) and (b[:1].isspace() or _line_break(b)):
                space = b if _line_break(b) else b[: len(b) - len(b.lstrip())]
                out[i : i + 2] = [space, a, b[len(space) :]]
            elif isinstance(b, Close) and _tight(b) and isinstance(a, str) and a[-1:].isspace():
                word = "" if _line_break(a) else a.rstrip()
                out[i : i + 2] = [word, b, a[len(word) :]]
            else:
                continue
            out = [piece for piece in out if piece != ""]
            moved = True
            break
    return out


def _line_break(text: str) -> bool:
    """Whether `text` is a line break as a `Break` writes it: spaces or a backslash, the newline, then what the next
    line starts with (a quote's `> `, a list item's indentation)."""
    return "\n" in text and text.lstrip(" \t\\").startswith("\n")


def _alternate(pieces: list[Piece]) -> list[Piece]:
    """Pairs of `*` or `_` that touch a marker of their character written with the other one, where it fits."""
    out = list(pieces)
    for i, j in sorted(_partners(pieces).items()):
        written = out[i].raw
        if written not in OTHER:
            continue
        mine = _touching(out, i) + _touching(out, j)
        if written[0] in mine and OTHER[written][0] not in mine and not _in_word(out, i, j):
            out[i], out[j] = _flipped(out[i]), _flipped(out[j])
    return out


def _flipped(marker: Open | Close) -> Open | Close:
    return replace(marker, raw=OTHER[marker.raw])


def _partners(pieces: Sequence[Piece]) -> dict[int, int]:
    """{index of an Open: index of its Close}."""
    partner, stack = {}, []
    for i, piece in enumerate(pieces):
        if isinstance(piece, Open):
            stack.append(i)
        elif isinstance(piece, Close) and stack:
            partner[stack.pop()] = i
    return partner


def _touching(pieces: list[Piece], i: int) -> str:
    """The first characters of the markers right before and right after marker i (no text between)."""
    found = ""
    for k in (i - 1, i + 1):
        if 0 <= k < len(pieces) and isinstance(pieces[k], (Open, Close)) and pieces[k].raw:
            found += pieces[k].raw[-1] if k < i else pieces[k].raw[0]
    return found


def _in_word(pieces: list[Piece], i: int, j: int) -> bool:
    """Whether the opening marker i follows, or the closing marker j precedes, a letter or digit."""
    return _text_next(pieces, i, -1)[-1:].isalnum() or _text_next(pieces, j, 1)[:1].isalnum()


def _text_next(pieces: list[Piece], i: int, step: int) -> str:
    """The text right before (step -1) or after (step 1) piece i, if no markup stands between."""
    k = i + step
    return pieces[k] if 0 <= k < len(pieces) and isinstance(pieces[k], str) else ""
