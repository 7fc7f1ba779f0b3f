"""`format: html`: the markup kept as it is, the text between tags translated.

An HTML string is cut into markup (tags, comments, doctypes, processing instructions, and the whole content of
<script>, <style>, <pre> and <code> elements) and text runs. Each text run with a letter or digit in it becomes one
line for the model: its character references unescaped (`&amp;` -> `&`) and its whitespace collapsed; the
translation is escaped again (`<`, `>`, `&`) and put back between the run's own leading and trailing whitespace.
So `<p>Hola <b>mundo</b>.</p>` sends "Hola", "mundo" (and not "."): inline tags split a sentence, as they do in
LibreTranslate's own HTML mode (which translates the text nodes of the parsed tree one by one).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

MARKUP = re.compile(r"<!--.*?(?:-->|$)|<![^>]*>?|<\?.*?(?:\?>|$)|</?[A-Za-z][^>]*>?", re.S)
KEPT = ("script", "style", "pre", "code")  # elements whose content is markup here, never translated
WORD = re.compile(r"\w")


@dataclass
class Piece:
    """A run of the input: markup (kept), or text whose translation replaces it when `translated`."""

    text: str
    translated: bool


def split_html(markup: str) -> list[Piece]:
    """`markup` as markup and text runs, in order; joining every piece's text gives `markup` back."""
    pieces: list[Piece] = []
    position = 0
    while position < len(markup):
        found = MARKUP.search(markup, position)
        start = found.start() if found else len(markup)
        if start > position:
            text = markup[position:start]
            pieces.append(Piece(text, bool(WORD.search(html.unescape(text)))))
        if not found:
            break
        end = _kept_element_end(markup, found)
        pieces.append(Piece(markup[start:end], False))
        position = end
    return pieces


def _kept_element_end(markup: str, tag: re.Match) -> int:
    """Where the markup piece that starts with `tag` ends: after the tag, or after the closing tag of a kept
    element's content (the end of the string when it is never closed)."""
    name = re.match(r"<([A-Za-z][A-Za-z0-9]*)", tag.group(0))
    if not name or name.group(1).lower() not in KEPT or tag.group(0).endswith("/>"):
        return tag.end()
    closing = re.compile(rf"</{name.group(1)}\s*>", re.IGNORECASE).search(markup, tag.end())
    return closing.end() if closing else len(markup)


def text_of(piece: Piece) -> str:
    """What the model reads for a translated piece: unescaped, whitespace collapsed."""
    return " ".join(html.unescape(piece.text).split())


def join_html(pieces: list[Piece], translations: list[str]) -> str:
    """The markup back, each translated piece replaced (in order) by its translation between its own spaces."""
    translations = iter(translations)
    out = []
    for piece in pieces:
        if not piece.translated:
            out.append(piece.text)
            continue
        lead = piece.text[: len(piece.text) - len(piece.text.lstrip())]
        trail = piece.text[len(piece.text.rstrip()) :]
        out.append(lead + html.escape(next(translations), quote=False) + trail)
    return "".join(out)
