"""The segment model every document format shares: text to translate, with the markup inside it kept as written.

A format's adapter (plain.py, html_doc.py, ...) cuts a document into parts: markup kept byte for byte (a `str`),
and `Segment`s, each a unit of text that is translated on its own (a paragraph, a heading, a table cell, all of a
file's cues). A segment is a list of pieces:

- `str`: text as written, read by the model as it is;
- `Char`: one character the model reads (`&`) that the document writes otherwise (`&amp;`, `\\*`);
- `Open` / `Close`: a pair of inline markup around words (`<b>` `</b>`, `**` `**`, `[` `](url)`), placed around the
  target words aligned to the words it held (placement.py); `keep=True` keeps what it holds as written (code);
  `link=True` for a link, which never comes to hold another link (HTML and Markdown links do not nest);
- `Atom`: markup that stands where it is (`<br>`, an image, a comment), after the target word aligned to the word
  before it; `separates=True` when it parts words as a space does; `protected` names a span of text that must not
  change (a placeholder, a URL, code: protection.py), masked from the model and placed as an atom;
- `Break`: whitespace as written where a line starts with more (`\\n> `, an indentation, a cue's number and times),
  put after the target word aligned to the word before it; `required=True` when it must appear, in order (cues).

The pieces' `raw` texts joined give the segment's source back exactly: the first test of every adapter.
`SentenceTranslator` is all a format asks of a model: sentences in, (translation, word alignment) out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from transformer.errors import UserError

Alignment = Sequence[tuple[int, int]]  # (source word, target word) links over whitespace-split words


class SentenceTranslator(Protocol):
    """A model as the documents see it (api.SentenceAdapter is the project's)."""

    def translate(self, sentences: list[str]) -> list[tuple[str, Alignment | None]]:
        """One (translation, alignment or None) per sentence, in order."""
        ...

    def fits(self, sentence: str) -> bool:
        """Whether `sentence` is within the model's length (longer ones are split before translation)."""
        ...


@dataclass(frozen=True, eq=False)
class Char:
    """One character the model reads, written otherwise in the document (an entity, an escape)."""

    text: str
    raw: str


@dataclass(frozen=True, eq=False)
class Open:
    """Inline markup that opens around words; `keep`: what it holds is kept as written; `link`: a link (holds no
    other link); `handle`: the adapter's."""

    raw: str
    keep: bool = False
    handle: object = None
    link: bool = False


@dataclass(frozen=True, eq=False)
class Close:
    """Inline markup that closes the innermost `Open`."""

    raw: str


@dataclass(frozen=True, eq=False)
class Atom:
    """Markup that stands on its own; `separates`: it parts words, as a space does; `link`: a link (an autolink);
    `protected`: the kind of a span of text kept as written (protection.py), '' for markup."""

    raw: str
    separates: bool = False
    link: bool = False
    protected: str = ""


@dataclass(frozen=True, eq=False)
class Break:
    """Whitespace written with more than one space (a line break and the next line's start); `required`: must
    appear in the output, in order."""

    raw: str
    required: bool = False


Piece = str | Char | Open | Close | Atom | Break
Markup = Open | Close | Atom | Break


def identity(text: str) -> str:
    return text


@dataclass
class Segment:
    """Text to translate with its markup; `escape` writes new text as the format needs it (`<` as `&lt;`)."""

    pieces: list[Piece]
    escape: Callable[[str], str] = identity
    info: dict = field(default_factory=dict)  # the adapter's notes (where the segment came from)

    def source(self) -> str:
        """The segment as written: every piece's raw text joined."""
        return "".join(raw(piece) for piece in self.pieces)


def raw(piece: Piece) -> str:
    """A piece as the document writes it."""
    return piece if isinstance(piece, str) else piece.raw


def check_pairs(pieces: Sequence[Piece]) -> None:
    """Refuse (ValueError, an adapter's bug) pieces whose `Open`s and `Close`s do not pair up."""
    depth = 0
    for piece in pieces:
        depth += isinstance(piece, Open) - isinstance(piece, Close)
        if depth < 0:
            raise ValueError("a Close without its Open")
    if depth:
        raise ValueError("an Open without its Close")


def plain(text: str, escape: Callable[[str], str] = identity) -> Segment:
    """A segment of text with no markup."""
    return Segment([text], escape)


@dataclass
class TextDocument:
    """A text document as kept parts and segments; `inner` holds the parts of markup whose own text has segments
    (an `<img alt="...">` inside a paragraph), written in its place."""

    parts: list[str | Segment]
    inner: dict[Markup, list[str | Segment]] = field(default_factory=dict)

    def segments(self) -> list[Segment]:
        inner = [part for parts in self.inner.values() for part in parts]
        return [part for part in [*self.parts, *inner] if isinstance(part, Segment)]

    def rebuild(self, outputs: Sequence[Sequence[Piece]]) -> str:
        """The document with each segment (in the order of `segments()`) replaced by its translated pieces."""
        translated = {id(segment): output for segment, output in zip(self.segments(), outputs, strict=True)}
        return self._join(self.parts, translated)

    def _join(self, parts: Sequence[str | Segment], translated: dict[int, Sequence[Piece]]) -> str:
        out = []
        for part in parts:
            pieces = [part] if isinstance(part, str) else translated[id(part)]
            for piece in pieces:
                inner = None if isinstance(piece, str) else self.inner.get(piece)
                out.append(raw(piece) if inner is None else self._join(inner, translated))
        return "".join(out)


def line_of(text: str, offset: int) -> int:
    """The 1-based line of `offset` in `text`."""
    return text.count("\n", 0, offset) + 1


def bad_file(name: str, what: str) -> UserError:
    """One line for a document that cannot be read as its format."""
    return UserError(f"{name}: {what}")
