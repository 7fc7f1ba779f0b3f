"""`--format srt` and `--format vtt`: subtitles, their numbers, times and settings kept byte for byte.

All the cues' text of a file is one segment: the text between two cues (the end of a cue, the blank line, the next
cue's number and times) is a required `Break`, so a sentence that runs over several cues is translated whole and
its words shared back over those cues by alignment (each cue boundary after the target word aligned to the word
before it, in order, and at least one word per cue where the translation has as many), while a cue boundary that
ends a sentence is kept as written. Line breaks inside a cue are placed by alignment too, or left out when their
place is taken. Cue styling (`<i>`, `<b>`, `<font ...>`, WebVTT's `<c.class>`, `<v Name>`, timestamps, `{\\an8}`)
is kept: pairs around their words, within their cue; a tag left open at the end of its cue stands where it was.

Checked first, one line naming the line: SRT cues must have a number and a `start --> end` line whose times the
`srt` package reads; a WebVTT file must be what webvtt-py reads strictly (the WEBVTT header, valid cue timings).
Blocks that are no cue (WebVTT's NOTE, STYLE, REGION) are kept as written.
"""

from __future__ import annotations

import html
import re

from transformer.documents.segments import Atom, Break, Char, Close, Open, Piece, Segment, TextDocument, bad_file

REFERENCE = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")


def parse_srt(source: str, *, name: str = "the document") -> TextDocument:
    """An SRT file as kept parts and the one segment of its cues' text; `UserError` for a block that is no cue."""
    import srt

    cues = []
    for first, last in _blocks(source):
        lines = source.split("\n")[first : last + 1]
        if len(lines) < 2 or not lines[0].strip().lstrip("\ufeff").isdigit() or "-->" not in lines[1]:
            raise bad_file(name, f"line {first + 1}: not an SRT cue (a number, then 'start --> end')")
        for stamp in lines[1].split("-->")[:1] + lines[1].split("-->")[1].split()[:1]:
            try:
                srt.srt_timestamp_to_timedelta(stamp.strip())
            except (srt.TimestampParseError, ValueError):
                raise bad_file(name, f"line {first + 2}: not an SRT time: {stamp.strip()!r}") from None
        cues.append((first + 2, last))
    return _document(source, cues, lambda text: text)


def parse_vtt(source: str, *, name: str = "the document") -> TextDocument:
    """A WebVTT file as kept parts and the one segment of its cues' text; `UserError` for a malformed file."""
    import webvtt
    from webvtt.errors import MalformedCaptionError, MalformedFileError

    try:
        webvtt.from_string(source, strict=True)
    except (MalformedFileError, MalformedCaptionError) as exc:
        reason = (str(exc).splitlines() or ["malformed"])[0]
        raise bad_file(name, f"not a valid WebVTT file ({reason})") from None
    cues, lines = [], source.split("\n")
    for first, last in _blocks(source)[1:]:  # the first block is the WEBVTT header
        timing = next((n for n in (first, first + 1) if n <= last and "-->" in lines[n]), None)
        if timing is not None and not lines[first].startswith(("NOTE", "STYLE", "REGION")):
            cues.append((timing + 1, last))
    return _document(source, cues, lambda text: html.escape(text, quote=False))


def _blocks(source: str) -> list[tuple[int, int]]:
    """(first, last) line of each run of lines that are not blank."""
    blocks, first = [], None
    lines = source.split("\n")
    for n, line in enumerate(lines):
        if line.strip() and first is None:
            first = n
        elif not line.strip() and first is not None:
            blocks.append((first, n - 1))
            first = None
    if first is not None:
        blocks.append((first, len(lines) - 1))
    return blocks


def _document(source: str, cues: list[tuple[int, int]], escape) -> TextDocument:
    """The kept parts around one segment: each cue's text lines (first..last, when there are any), the text
    between cues as required breaks."""
    starts = [0]
    for line in source.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    texts = [(starts[first], starts[last] + len(source.split("\n")[last])) for first, last in cues if first <= last]
    if not texts:
        return TextDocument([source])
    pieces: list[Piece] = []
    for n, (start, end) in enumerate(texts):
        if n:
            pieces.append(Break(source[texts[n - 1][1] : start], required=True))
        pieces += cue_pieces(source[start:end])
    return TextDocument([source[: texts[0][0]], Segment(pieces, escape), source[texts[-1][1] :]])


def cue_pieces(text: str) -> list[Piece]:
    """A cue's text as pieces: tags paired within the cue (else atoms), timestamps and `{\\...}` as atoms, character
    references as `Char`s, line breaks as breaks."""
    pieces: list[Piece] = []
    stack: list[tuple[str, int]] = []
    i = 0
    while i < len(text):
        end = text.find(">", i) + 1 if text[i] == "<" else text.find("}", i) + 1 if text.startswith("{\\", i) else 0
        reference = REFERENCE.match(text, i) if text[i] == "&" else None
        if end:
            tag = text[i:end]
            pieces.append(_tag(tag, stack, len(pieces)))
            i = end
        elif reference:
            pieces.append(Char(html.unescape(reference.group(0)), reference.group(0)))
            i = reference.end()
        else:
            pieces.append(Break(text[i]) if text[i] == "\n" else text[i])
            i += 1
    for _, index in stack:  # left open at the cue's end
        pieces[index] = Atom(pieces[index].raw)
    return pieces


def _tag(tag: str, stack: list[tuple[str, int]], index: int) -> Piece:
    name = re.split(r"[\s.>]", tag[1:].lstrip("/"), maxsplit=1)[0].lower()
    if tag.startswith("</"):
        if stack and stack[-1][0] == name:
            stack.pop()
            return Close(tag)
        return Atom(tag)
    if tag.startswith("<") and name[:1].isalpha():
        stack.append((name, index))
        return Open(tag)
    return Atom(tag)  # a timestamp, {\an8}
