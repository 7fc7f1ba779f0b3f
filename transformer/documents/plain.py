"""`--format text`: plain text by paragraphs.

A paragraph is a run of lines that are not blank; each is one segment, cut into sentences and translated, and the
translations joined with the source's own spacing (placement.py puts a line break inside a sentence after the target
word aligned to the word before it). Blank lines, the newlines between paragraphs and each paragraph's first
indentation are kept as written, so the output has one paragraph per input paragraph, in place.
"""

from __future__ import annotations

from transformer.documents.segments import Segment, plain


def parse(text: str) -> list[str | Segment]:
    """The text as kept parts and one segment per paragraph; joined, the parts' sources give `text` back."""
    parts: list[str | Segment] = []
    lines = _lines(text)
    i = 0
    while i < len(lines):
        filled = bool(lines[i].strip())
        j = i
        while j < len(lines) and bool(lines[j].strip()) == filled:
            j += 1
        body = "".join(lines[i:j])
        if filled:
            content = body.rstrip("\r\n")
            parts += [plain(content), body[len(content) :]]
        else:
            parts.append(body)
        i = j
    return parts


def _lines(text: str) -> list[str]:
    """`text` in lines, each with its newline (the last without, when the text does not end in one)."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
