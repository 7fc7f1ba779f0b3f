"""HTML as html.parser reads it, for html_doc.py: events with their source text, character references, attributes.

Each event's source text runs from where the parser saw it start to where the next one starts, so the events
cover the document byte for byte. Character references are read as what they stand for (`Char`); a reference
without its ';' that stands for a prefix only ("&notit" is "¬it") is read so too, as browsers read it.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from itertools import accumulate

from transformer.documents.segments import Char, Piece, Segment

INLINE = frozenset(
    [
        "a",
        "abbr",
        "b",
        "bdi",
        "bdo",
        "big",
        "button",
        "cite",
        "data",
        "del",
        "dfn",
        "em",
        "font",
        "i",
        "ins",
        "label",
        "mark",
        "nobr",
        "q",
        "s",
        "small",
        "span",
        "strike",
        "strong",
        "sub",
        "sup",
        "time",
        "tt",
        "u",
    ]
)
KEPT_INLINE = frozenset(["code", "kbd", "samp", "var"])  # inside a sentence, written as they are
VOID_INLINE = frozenset(["br", "img", "wbr", "input"])  # atoms; br parts words
KEPT_BLOCKS = frozenset(
    ["script", "style", "pre", "textarea", "svg", "math", "template"]
)  # kept whole, never translated
TRANSLATED_ATTRIBUTES = ("alt", "title")
REFERENCE = re.compile(r"&(?:#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[A-Za-z][A-Za-z0-9]*;?)")
UNENDED = re.compile(r"<[A-Za-z/!?]")


def escape_text(text: str) -> str:
    return html.escape(text, quote=False)


def escape_attribute(text: str) -> str:
    return html.escape(text, quote=True)


class _Events(HTMLParser):
    """The parser's events as (start offset, kind, tag, attrs); each event's source runs to the next one's start."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.line_starts = list(accumulate((len(line) + 1 for line in source.split("\n")), initial=0))
        self.events: list[tuple[int, str, str, list]] = []

    def _add(self, kind: str, tag: str = "", attrs: list | None = None) -> None:
        line, column = self.getpos()
        self.events.append((self.line_starts[line - 1] + column, kind, tag, attrs or []))

    def handle_starttag(self, tag, attrs):
        self._add("start", tag, attrs)

    def handle_startendtag(self, tag, attrs):
        self._add("startend", tag, attrs)

    def handle_endtag(self, tag):
        self._add("end", tag)

    def handle_data(self, data):
        self._add("data")

    def handle_comment(self, data):
        self._add("comment")

    def handle_decl(self, decl):
        self._add("other")

    def handle_pi(self, data):
        self._add("other")

    def unknown_decl(self, data):
        self._add("other")

    def parse_html_declaration(self, i: int) -> int:
        """`<![...`: a CDATA section to its `]]>`, anything else to the next `>` (-1: still open at the end). Before
        Python 3.13, html.parser's own reading of a malformed one (`<![ x`) raises AssertionError."""
        if not self.rawdata.startswith("<![", i):
            return super().parse_html_declaration(i)
        cdata = self.rawdata.startswith("<![CDATA[", i)
        end = self.rawdata.find("]]>" if cdata else ">", i + 3)
        if end < 0:
            return -1
        self._add("other")
        return end + (3 if cdata else 1)


def events(source: str) -> list[tuple[str, str, str, list, int]]:
    """(kind, source text, tag, attributes, start offset) of each event, covering `source` in order."""
    parser = _Events(source)
    parser.feed(source)
    parser.close()
    starts = [start for start, *_ in parser.events] + [len(source)]
    found = []
    for (start, kind, tag, attrs), end in zip(parser.events, starts[1:]):
        if end > start and kind == "data" and found and found[-1][0] == "data":  # one run of text, one event
            found[-1] = ("data", found[-1][1] + source[start:end], "", [], found[-1][4])
        elif end > start:
            found.append((kind, source[start:end], tag, attrs, start))
    return found


def text_pieces(text: str) -> list[Piece]:
    """Text as written -> pieces: character references as `Char`s of what they stand for."""
    pieces: list[Piece] = []
    position = 0
    for match in REFERENCE.finditer(text):
        written = match.group(0)
        read = html.unescape(written)
        if read == written:
            continue
        same = 0  # a reference without its ';' may stand for a prefix only ("&notit" -> "¬it")
        while same < min(len(read), len(written)) - 1 and read[-1 - same] == written[-1 - same]:
            same += 1
        pieces += [text[position : match.start()], Char(read[: len(read) - same], written[: len(written) - same])]
        position = match.end() - same
    pieces.append(text[position:])
    return [piece for piece in pieces if piece != ""]


def attribute_values(tag: str) -> list[tuple[str, int, int]]:
    """(name, start, end) of each attribute value in a start tag as written (quotes excluded)."""
    found, i = [], 1
    while i < len(tag) and not (tag[i].isspace() or tag[i] in "/>"):
        i += 1  # the tag's name
    while i < len(tag):
        while i < len(tag) and (tag[i].isspace() or tag[i] == "/"):
            i += 1
        start = i
        while i < len(tag) and not (tag[i].isspace() or tag[i] in "/>=\"'"):
            i += 1
        name = tag[start:i].lower()
        if not name:
            break
        while i < len(tag) and tag[i].isspace():
            i += 1
        if i >= len(tag) or tag[i] != "=":
            continue
        i += 1
        while i < len(tag) and tag[i].isspace():
            i += 1
        if i < len(tag) and tag[i] in "\"'":
            end = tag.find(tag[i], i + 1)
            end = len(tag) if end < 0 else end
            found.append((name, i + 1, end))
            i = end + 1
        else:
            start = i
            while i < len(tag) and not (tag[i].isspace() or tag[i] == ">"):
                i += 1
            found.append((name, start, i))
    return found


def tag_parts(tag: str, name: str) -> list[str | Segment]:
    """A start tag as parts, its alt and title values as segments (alt only where it is text: img, area, input)."""
    parts: list[str | Segment] = []
    position = 0
    for attribute, start, end in attribute_values(tag):
        value = tag[start:end]
        wanted = attribute == "title" or (attribute == "alt" and name in ("img", "area", "input"))
        if wanted and any(c.isalnum() for c in html.unescape(value)):
            parts += [tag[position:start], Segment(text_pieces(value), escape_attribute, {"attribute": attribute})]
            position = end
    return [*parts, tag[position:]] if parts else [tag]


def no_translate(tag: str, attrs: list) -> bool:
    values = {name: (value or "") for name, value in attrs}
    return values.get("translate", "").lower() == "no" or "notranslate" in values.get("class", "").split()
