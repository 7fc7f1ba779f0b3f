"""`--format markdown`: CommonMark (with GitHub's tables and strikethrough) read with markdown-it-py.

The block structure comes from the parser: each paragraph, heading and table cell's inline text is a segment
(markdown_inline.py reads it, byte for byte), so headings, lists, tables and quotes keep their markers and
indentation; fenced and indented code, HTML blocks, link reference definitions and thematic breaks are kept as
written. Inside a segment, emphasis, strong, strikethrough and links are pairs placed by alignment, code spans are
kept as written, autolinks, images and line breaks are kept (a line break of a quote or list item with what its
next line starts with, `\\n> `). New text is backslash-escaped where it could start markup (`*`, `_`, `[`, ...).

A run the adapter cannot match back onto its source (none is known) is kept as written, with a warning. A file
with CRLF line endings is read as LF and written back with CRLF; one that mixes line endings is refused.

Nesting: the parser follows quotes and lists `MAX_NESTING` levels deep (markdown-it's own guard against runaway
recursion: its default preset's 100, where its commonmark preset has 20; a list item counts two levels, its list
and itself) and skips whatever lies deeper, text included. A file that nests that deep is refused in one line
rather than written back with that text untranslated.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from itertools import accumulate

from transformer.documents.markdown_emphasis import settle_emphasis
from transformer.documents.markdown_inline import InlineRun, UnmatchedError, escape
from transformer.documents.segments import Break, Segment, TextDocument, bad_file

log = logging.getLogger(__name__)
MAX_NESTING = 100  # block levels the parser follows (see the module docstring)
CONTAINERS = ("blockquote_open", "list_item_open")  # the block tokens whose content the parser reads nested


def parse(source: str, *, name: str = "the document") -> TextDocument:
    """The document as kept parts and one segment per inline run (see the module docstring)."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING}).enable(["table", "strikethrough"]).parse(source)
    _check_nesting(tokens, name)
    lines = source.split("\n")
    starts = list(accumulate((len(line) + 1 for line in lines), initial=0))
    regions: list[tuple[int, int, Segment]] = []
    cursor: dict[int, int] = {}  # per line, where the next table cell is looked for
    cell = False
    for token in tokens:
        if token.type in ("th_open", "td_open"):
            cell = True
        if token.type != "inline" or not token.map or not token.content.strip():
            continue
        found = _locate(token.content.split("\n"), lines, token.map, cursor, cell)
        cell = False
        region = found and _segment(token, source, starts, found)
        if region:
            regions.append(region)
        else:
            log.warning("%s line %d: kept as written (its inline markup could not be matched)", name, token.map[0] + 1)
    parts: list[str | Segment] = []
    position = 0
    for start, end, segment in regions:
        parts += [source[position:start], segment]
        position = end
    parts.append(source[position:])
    return TextDocument([part for part in parts if part != ""])


def _check_nesting(tokens, name: str) -> None:
    """A one-line `UserError` when a quote or list item stands at the parser's nesting limit: the parser skipped
    its content (markdown-it's block parser stops when its level reaches `MAX_NESTING`)."""
    for token in tokens:
        if token.type in CONTAINERS and token.level + 1 >= MAX_NESTING:
            line = token.map[0] + 1 if token.map else "?"
            raise bad_file(
                name,
                f"line {line}: quotes and lists nest more than {MAX_NESTING} levels deep, past what the Markdown "
                "reader follows (their text would stay untranslated); nest them less, or translate the file as "
                "plain text with --format text",
            )


def _locate(content: list[str], lines: list[str], span: list[int], cursor: dict[int, int], cell: bool):
    """[(line, column)] where each line of an inline run's content stands in the source, or None."""
    found, line = [], span[0]
    for text in content:
        while line < span[1]:
            source = lines[line]
            column = len(source.rstrip()) - len(text) if not cell and source.rstrip().endswith(text) else -1
            column = source.find(text, cursor.get(line, 0)) if column < 0 else column
            if column >= 0:
                found.append((line, column))
                cursor[line] = column + len(text)
                line += 1
                break
            line += 1
        else:
            return None
    return found


def _segment(token, source: str, starts: list[int], found: list[tuple[int, int]]):
    """(start, end, segment) of an inline run whose content lines stand at `found`; None if it does not match."""
    content = token.content.split("\n")
    try:
        pieces = InlineRun(token.content, token.children or []).pieces_of()
    except UnmatchedError:
        return None
    joins = [  # what the source has where the content has its n-th newline: the line's end and the next's start
        source[starts[line] + column + len(text) : starts[next_line] + next_column]
        for (line, column), text, (next_line, next_column) in zip(found, content, found[1:])
    ]
    pieces = _with_joins(pieces, iter(joins))
    start = starts[found[0][0]] + found[0][1]
    end = starts[found[-1][0]] + found[-1][1] + len(content[-1])
    segment = Segment(pieces, escape, info={"finish": settle_emphasis})
    return (start, end, segment) if segment.source() == source[start:end] else None


def _with_joins(pieces: list, joins) -> list:
    """The pieces with each newline of the content replaced by what the source has there (`\\n> `, `\\n   `)."""
    out = []
    for piece in pieces:
        text = piece if isinstance(piece, str) else getattr(piece, "raw", "")
        if "\n" not in text:
            out.append(piece)
        elif isinstance(piece, Break):
            out.append(Break("".join(_joined(text, joins))))
        elif isinstance(piece, str):
            out.append("".join(_joined(text, joins)))
        else:
            out.append(replace(piece, raw="".join(_joined(text, joins))))
    return out


def _joined(text: str, joins):
    for n, part in enumerate(text.split("\n")):
        yield (next(joins) if n else "") + part
