"""`format: html`: the markup kept byte for byte, the text between tags translated.

An HTML string is read by the standard library's `html.parser`, which knows where a tag ends (a `>` inside a quoted
attribute value does not end it), what a comment, a declaration and a processing instruction are, and that the
content of <script> and <style> is raw text. The parser reports where each construct starts; the string is cut at
those places into markup (tags, comments, doctypes, processing instructions, CDATA sections, and the whole content
of <script>, <style>, <pre> and <code> elements) and text runs, and joining the pieces gives the string back.

Each text run with a letter or digit in it becomes one line for the model: its character references unescaped
(`&amp;` -> `&`) and its whitespace collapsed; the translation is escaped again (`<`, `>`, `&`) and put back between
the run's own leading and trailing whitespace. A run the model gives back unchanged keeps its own bytes (entities
and line breaks included), so a translation that changes nothing gives the input back byte for byte. So
`<p>Hola <b>mundo</b>.</p>` sends "Hola", "mundo" (and not "."): inline tags split a sentence, as they do in
LibreTranslate's own HTML mode (which translates the text nodes of the parsed tree one by one).

Malformed input, read as HTML5 reads it where `html.parser` is lenient: a construct still open at the end of the
string (`<b`, `<a href="x`, `<!-- never closed`) is markup, never text; a `<` that starts no construct (`a < b`,
`<3`) is text; a `<![CDATA[` section runs to its `]]>` (or the end), `<![` anything else to the next `>`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser

KEPT = ("script", "style", "pre", "code")  # elements whose content is markup here, never translated
WORD = re.compile(r"\w")


@dataclass
class Piece:
    """A run of the input: markup (kept), or text whose translation replaces it when `translated`."""

    text: str
    translated: bool


class _Starts(HTMLParser):
    """Records where each construct of the input starts, and whether it is text outside a kept element."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.line_starts = [0] + [match.end() for match in re.finditer("\n", markup)]  # html.parser counts '\n' only
        self.constructs: list[tuple[int, bool]] = []  # (offset, text outside a kept element)
        self.kept_element: str | None = None  # the kept element we are inside

    def position(self) -> int:
        """The input offset of the construct being handled (or, after `feed`, of the first one not handled)."""
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def _mark(self, text: bool = False) -> None:
        self.constructs.append((self.position(), text and self.kept_element is None))

    def handle_starttag(self, tag: str, attrs) -> None:
        self._mark()
        if self.kept_element is None and tag in KEPT:
            self.kept_element = tag

    def handle_endtag(self, tag: str) -> None:
        self._mark()
        if tag == self.kept_element:
            self.kept_element = None

    def handle_startendtag(self, tag: str, attrs) -> None:  # <br/>, <code/>: nothing inside to keep
        self._mark()

    def handle_data(self, data: str) -> None:
        self._mark(text=True)

    def handle_comment(self, data: str) -> None:
        self._mark()

    def handle_decl(self, decl: str) -> None:
        self._mark()

    def handle_pi(self, data: str) -> None:
        self._mark()

    def unknown_decl(self, data: str) -> None:
        self._mark()

    def parse_html_declaration(self, i: int) -> int:
        """`<![...`: a CDATA section to its `]]>`, anything else to the next `>` (-1: still open). html.parser's own
        reading of these raises on malformed ones before Python 3.13."""
        if not self.rawdata.startswith("<![", i):
            return super().parse_html_declaration(i)
        cdata = self.rawdata.startswith("<![CDATA[", i)
        end = self.rawdata.find("]]>" if cdata else ">", i + 3)
        if end < 0:
            return -1
        self._mark()
        return end + (3 if cdata else 1)


def split_html(markup: str) -> list[Piece]:
    """`markup` as markup and text runs, in order; joining every piece's text gives `markup` back."""
    runs: list[tuple[list[str], bool]] = []  # (segments, is a text run): adjacent segments of one kind joined
    for text, is_text in _segments(markup):
        if runs and runs[-1][1] == is_text:
            runs[-1][0].append(text)
        elif text:
            runs.append(([text], is_text))
    joined = [("".join(parts), is_text) for parts, is_text in runs]
    return [Piece(text, is_text and bool(WORD.search(html.unescape(text)))) for text, is_text in joined]


def _segments(markup: str) -> Iterator[tuple[str, bool]]:
    """`markup` cut where html.parser's constructs start: (text, whether it is text outside a kept element)."""
    reader = _Starts(markup)
    reader.feed(markup)  # not closed: what is still open at the end is left unhandled, and is markup here
    tail = reader.position()
    cuts = [(0, False)] + [(start, text) for start, text in reader.constructs if start < tail]
    if tail < len(markup):  # an unfinished construct (markup), or text with a '&' html.parser held back
        cuts.append((tail, reader.kept_element is None and not markup.startswith("<", tail)))
    for (start, text), (end, _) in zip(cuts, cuts[1:] + [(len(markup), False)]):
        cut = markup.find("<", start + 1, end) if text else -1  # a construct html.parser skips silently (`</>`)
        if cut < 0:
            yield markup[start:end], text
        else:
            yield markup[start:cut], True
            yield markup[cut:end], False


def text_of(piece: Piece) -> str:
    """What the model reads for a translated piece: unescaped, whitespace collapsed."""
    return " ".join(html.unescape(piece.text).split())


def join_html(pieces: list[Piece], translations: list[str]) -> str:
    """The markup back, each translated piece replaced (in order) by its translation between its own spaces (or
    kept as it is when its translation is what the model read)."""
    translations = iter(translations)
    out = []
    for piece in pieces:
        if not piece.translated:
            out.append(piece.text)
            continue
        translation = next(translations)
        if translation == text_of(piece):
            out.append(piece.text)
            continue
        lead = piece.text[: len(piece.text) - len(piece.text.lstrip())]
        trail = piece.text[len(piece.text.rstrip()) :]
        out.append(lead + html.escape(translation, quote=False) + trail)
    return "".join(out)
