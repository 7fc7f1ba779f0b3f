"""One inline run of Markdown (a paragraph's, a heading's, a table cell's text) as segment pieces, byte for byte.

markdown-it-py parses the run into tokens but keeps no offsets, so the tokens are matched back onto the run's
source text, in order: text (a `\\*` escape or an `&amp;` reference read as the character it stands for, a `Char`),
emphasis, strong and strikethrough markers (`Open`/`Close`), links (`[` ... `](url "title")`, reference links too),
code spans (a kept pair: the model reads the code, the output has it as written), autolinks and images (`Atom`s,
untouched), inline HTML (pairs where its tags pair up with nothing crossing them, else atoms), and line breaks
(`Break`: the spaces, backslash and newline). `UnmatchedError` when a token cannot be found where the run has it.
"""

from __future__ import annotations

import html
import re
import string

from transformer.documents.segments import Atom, Break, Char, Close, Open, Piece

ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
TAG_NAME = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)")
PUNCTUATION = frozenset(string.punctuation)
PAIRS = {"em": "em", "strong": "strong", "s": "s"}


class UnmatchedError(Exception):
    """A token of the run that its source text does not have where expected."""


def escape(text: str) -> str:
    """New text for Markdown: the characters that could start markup, backslash-escaped."""
    return "".join("\\" + c if c in "\\`*_[]<|" else c for c in text)


class InlineRun:
    """The pieces of `source` (a run's text, as in markdown-it's inline token) from its `children` tokens."""

    def __init__(self, source: str, children: list) -> None:
        self.source, self.children, self.at = source, children, 0
        self.pieces: list[Piece] = []

    def pieces_of(self) -> list[Piece]:
        paired = _paired_html(self.children)
        skip_to = None
        for index, token in enumerate(self.children):
            if skip_to is not None:
                skip_to = None if token.type == "link_close" else skip_to
                continue
            kind = token.type
            if kind == "text":
                self._text(token.content)
            elif kind in ("softbreak", "hardbreak"):
                self._break()
            elif kind.endswith("_open") and kind[:-5] in PAIRS:
                self.pieces.append(Open(self._expect(token.markup)))
            elif kind.endswith("_close") and kind[:-6] in PAIRS:
                self.pieces.append(Close(self._expect(token.markup)))
            elif kind == "code_inline":
                self._code(token.markup)
            elif kind == "link_open" and token.markup == "autolink":
                self.pieces.append(Atom(self._through(">"), link=True))
                skip_to = "link_close"
            elif kind == "link_open":
                self.pieces.append(Open(self._expect("["), link=True))
            elif kind == "link_close":
                self.pieces.append(Close(self._link_tail()))
            elif kind == "image":
                self.pieces.append(Atom(self._image()))
            elif kind == "html_inline":
                written = self._expect(token.content)
                self.pieces.append(paired.get(index, Atom)(written))
            else:
                raise UnmatchedError(f"a {kind} token")
        if self.at != len(self.source):
            raise UnmatchedError("text after the last token")
        return self.pieces

    def _expect(self, written: str) -> str:
        if not self.source.startswith(written, self.at):
            raise UnmatchedError(repr(written))
        self.at += len(written)
        return written

    def _through(self, end: str) -> str:
        stop = self.source.find(end, self.at)
        if stop < 0:
            raise UnmatchedError(repr(end))
        return self._expect(self.source[self.at : stop + len(end)])

    def _text(self, text: str) -> None:
        source, i = self.source, 0
        while i < len(text):
            char, at = text[i], self.at
            entity = ENTITY.match(source, at) if source.startswith("&", at) else None
            read = html.unescape(entity.group(0)) if entity else ""
            if source.startswith("\\", at) and source[at + 1 : at + 2] == char and char in PUNCTUATION:
                self.pieces.append(Char(char, "\\" + char))
                self.at, i = at + 2, i + 1
            elif entity and read and text.startswith(read, i):
                self.pieces.append(Char(read, entity.group(0)))
                self.at, i = entity.end(), i + len(read)
            elif source.startswith(char, at):
                self.pieces.append(char)
                self.at, i = at + 1, i + 1
            else:
                raise UnmatchedError(f"text {text!r}")

    def _break(self) -> None:
        start, source = self.at, self.source
        while self.at < len(source) and source[self.at] in " \t\\":
            self.at += 1
        if not source.startswith("\n", self.at):
            raise UnmatchedError("a line break")
        self.at += 1
        while self.at < len(source) and source[self.at] in " \t":
            self.at += 1
        self.pieces.append(Break(source[start : self.at]))

    def _code(self, ticks: str) -> None:
        self._expect(ticks)
        end = self.at
        while True:
            end = self.source.find(ticks, end)
            if end < 0:
                raise UnmatchedError("the end of a code span")
            if not self.source.startswith("`", end + len(ticks)) and self.source[end - 1] != "`":
                break
            end += 1
        self.pieces += [Open(ticks, keep=True), self.source[self.at : end], Close(ticks)]
        self.at = end + len(ticks)

    def _link_tail(self) -> str:
        """`]` and what follows it: `(destination "title")`, `[label]`, or nothing (a shortcut reference)."""
        start = self.at
        self._expect("]")
        end = _inline_tail(self.source, self.at)
        if end is None and self.source.startswith("[", self.at):
            end = _label_end(self.source, self.at)
        self.at = end if end is not None else self.at
        return self.source[start : self.at]

    def _image(self) -> str:
        start = self.at
        self._expect("![")
        close = _label_end(self.source, self.at - 1)
        if close is None:
            raise UnmatchedError("the end of an image's text")
        self.at = close - 1
        self._link_tail()
        return self.source[start : self.at]


def _inline_tail(source: str, at: int) -> int | None:
    """The end of `(destination "title")` starting at `at`, as markdown-it reads it; None if there is none."""
    from markdown_it.helpers import parseLinkDestination, parseLinkTitle

    if not source.startswith("(", at):
        return None
    end = len(source)
    at = _skip_space(source, at + 1)
    if at >= end:
        return None
    destination = parseLinkDestination(source, at, end)
    if destination.ok:
        at = destination.pos
        start = at
        at = _skip_space(source, at)
        title = parseLinkTitle(source, at, end) if at < end and at != start else None
        if title is not None and title.ok:
            at = _skip_space(source, title.pos)
    return at + 1 if source.startswith(")", at) else None


def _skip_space(source: str, at: int) -> int:
    while at < len(source) and source[at] in " \t\n":
        at += 1
    return at


def _label_end(source: str, at: int) -> int | None:
    """Just past the `]` that closes the `[` at `at` (brackets nest, backslashes escape)."""
    depth, i = 0, at
    while i < len(source):
        if source[i] == "\\":
            i += 2
            continue
        depth += (source[i] == "[") - (source[i] == "]")
        if depth == 0:
            return i + 1
        i += 1
    return None


def _paired_html(children: list) -> dict:
    """{token index: Open or Close} for the inline HTML tags that pair up with nothing crossing them."""
    stack: list[tuple[str, int]] = []
    paired: dict = {}
    for index, token in enumerate(children):
        kind = token.type
        if kind.endswith("_open") and (kind[:-5] in PAIRS or kind == "link_open"):
            stack.append((kind[:-5], index))
        elif kind.endswith("_close") and (kind[:-6] in PAIRS or kind == "link_close"):
            while stack and stack[-1][0] != kind[:-6]:
                stack.pop()  # an HTML tag left open inside: an atom
            if stack:
                stack.pop()
        elif kind == "html_inline" and (match := TAG_NAME.match(token.content)):
            closing, name = match.group(1), "<" + match.group(2).lower()
            if not closing and not token.content.rstrip().endswith("/>"):
                stack.append((name, index))
            elif closing and stack and stack[-1][0] == name:
                paired[stack.pop()[1]], paired[index] = Open, Close
    return paired
