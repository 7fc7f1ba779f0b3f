"""`--format html`: HTML (and XHTML) read with the standard library's html.parser, every byte kept but the text.

- Block elements (p, div, li, td, h1, ... and any element not known to be inline) bound segments; inline elements
  (b, i, em, strong, a, span, ...) do not: a sentence is translated whole, and each inline pair placed around the
  target words aligned to its words (placement.py). `<br>` parts words where it stands; images, comments and other
  void inline elements stay after the word they followed.
- Kept as written: tags with their attributes, comments, doctypes; the whole of script, style, pre, textarea, svg,
  math, template; code, kbd, samp and var inside a sentence (the model reads their words, the output has them as
  written); any element with `translate="no"` (or class `notranslate`).
- Character references are read as what they stand for (`&amp;` -> `&`); a word that comes back unchanged keeps
  them as written, a new one is escaped (`&`, `<`, `>`).
- `attributes=True` also translates `alt` and `title` attribute values, each as a segment of its own.
- Refused, one line naming the line: an inline end tag that closes an element with another still open inside
  (`<b><i>x</b></i>`), a tag or comment that never ends, a kept element (script, ...) never closed. An inline
  element left open at the end of its block, or an end tag with nothing to close, is kept where it stands.
"""

from __future__ import annotations

from transformer.documents.html_markup import (
    INLINE,
    KEPT_BLOCKS,
    KEPT_INLINE,
    UNENDED,
    VOID_INLINE,
    escape_text,
    events,
    no_translate,
    tag_parts,
    text_pieces,
)
from transformer.documents.segments import Atom, Close, Open, Piece, Segment, TextDocument, bad_file, line_of

VOID = frozenset(
    ["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"]
)


def parse(source: str, *, name: str = "the document", attributes: bool = False) -> TextDocument:
    """The document as kept parts and segments (see the module docstring); `UserError` for broken markup."""
    blocks = Blocks(source, name, attributes)
    for kind, text, tag, attrs, start in events(source):
        blocks.event(kind, text, tag, attrs, start)
    return blocks.finish()


class Blocks:
    """The events, one at a time, sorted into kept parts and block segments."""

    def __init__(self, source: str, name: str, attributes: bool) -> None:
        self.source, self.name, self.attributes = source, name, attributes
        self.document = TextDocument([])
        self.pieces: list[Piece] = []  # the block being read
        self.open: list[tuple[str, int, int]] = []  # inline elements open in it: (tag, index in pieces, start)
        self.kept: tuple[str, int, int] | None = None  # a kept element being copied: (tag, depth, start)

    def event(self, kind: str, text: str, tag: str, attrs: list, start: int) -> None:
        if self.kept is not None:
            self._copy(kind, text, tag)
        elif kind == "data":
            if unended := UNENDED.search(text):  # html.parser gives up on a tag only at the end
                shown = text[unended.start() :][:30].split("\n")[0]
                raise self._error(start, f"a tag or comment that never ends ({shown!r}...)")
            self.pieces += text_pieces(text)
        elif kind == "comment":
            self.pieces.append(Atom(text))
        elif kind in ("start", "startend"):
            self._start(kind, text, tag, attrs, start)
        elif kind == "end" and (tag in INLINE or tag in KEPT_INLINE):
            self._end_inline(text, tag, start)
        else:  # a block's end, a doctype, a processing instruction
            self._boundary(text)

    def _start(self, kind: str, text: str, tag: str, attrs: list, start: int) -> None:
        inline = tag in INLINE or tag in KEPT_INLINE or tag in VOID_INLINE
        if not inline and (tag in KEPT_BLOCKS or no_translate(tag, attrs)):
            self._boundary(text, tag)
            if kind == "start" and tag not in VOID:
                self.kept = (tag, 1, start)
        elif not inline:
            self._boundary(text, tag)
        elif kind == "startend" or tag in VOID_INLINE:
            self.pieces.append(self._markup(Atom(text, separates=tag == "br"), text, tag))
        else:
            keep = tag in KEPT_INLINE or no_translate(tag, attrs)
            self.open.append((tag, len(self.pieces), start))
            self.pieces.append(self._markup(Open(text, keep=keep, link=tag == "a"), text, tag))

    def _end_inline(self, text: str, tag: str, start: int) -> None:
        if self.open and self.open[-1][0] == tag:
            self.open.pop()
            self.pieces.append(Close(text))
        elif any(name == tag for name, _, _ in self.open):
            inner = self.open[-1][0]
            raise self._error(start, f"</{tag}> closes <{tag}> while <{inner}> inside it is still open")
        else:
            self.pieces.append(Atom(text))  # nothing to close: kept where it stands

    def _markup(self, piece: Open | Atom, text: str, tag: str) -> Open | Atom:
        if self.attributes:
            parts = tag_parts(text, tag)
            if len(parts) > 1:
                self.document.inner[piece] = parts
        return piece

    def _boundary(self, text: str, tag: str = "") -> None:
        self._flush()
        parts = tag_parts(text, tag) if self.attributes and tag and text.startswith("<") else [text]
        self.document.parts += parts

    def _flush(self) -> None:
        for _, index, _ in self.open:  # left open at the block's end: kept where it stands
            self.pieces[index] = Atom(self.pieces[index].raw)
        self.open = []
        if self.pieces:  # one with no word is written back as it is (pipeline.py)
            self.document.parts.append(Segment(self.pieces, escape_text))
        self.pieces = []

    def _copy(self, kind: str, text: str, tag: str) -> None:
        name, depth, start = self.kept
        if tag == name and kind == "start":
            depth += 1
        elif tag == name and kind == "end":
            depth -= 1
        self.document.parts.append(text)
        self.kept = (name, depth, start) if depth else None

    def finish(self) -> TextDocument:
        if self.kept is not None:
            name, _, start = self.kept
            raise self._error(start, f"<{name}> is never closed")
        self._flush()
        return self.document

    def _error(self, start: int, what: str):
        return bad_file(self.name, f"line {line_of(self.source, start)}: {what}")
