"""The document formats by name: their adapters (loaded only when asked for), file extensions and packages.

`read_document(data, format)` parses a document (a `UserError` for one that is not of its format, before any
model is loaded); `Parsed.segments()` and `Parsed.rebuild(outputs)` are each adapter's two other parts. Text
formats are UTF-8: invalid bytes are one line naming the line and byte, a byte-order mark is kept, and CRLF files
are read as LF and written back with CRLF (a file that mixes the two is refused).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from transformer.documents.segments import Piece, Segment, bad_file
from transformer.errors import UserError
from transformer.fileio import decode_utf8

FORMATS = {  # name -> (extensions, the modules it needs besides sentencex)
    "text": ((".txt", ".text"), ()),
    "html": ((".html", ".htm", ".xhtml"), ()),
    "markdown": ((".md", ".markdown"), ("markdown_it",)),
    "srt": ((".srt",), ("srt",)),
    "vtt": ((".vtt",), ("webvtt",)),
    "docx": ((".docx",), ("docx",)),
    "po": ((".po", ".pot"), ("polib",)),
    "xliff": ((".xlf", ".xliff"), ()),
}
EXTRA = 'pip install -e ".[documents]"'  # the `documents` extra of pyproject.toml


class Parsed(Protocol):
    def segments(self) -> list[Segment]: ...

    def rebuild(self, outputs: Sequence[Sequence[Piece]]) -> str | bytes: ...


def guess_format(path: str | Path) -> str:
    """The format of a file from its extension; a `UserError` naming the known ones otherwise."""
    suffix = Path(path).suffix.lower()
    for name, (extensions, _) in FORMATS.items():
        if suffix in extensions:
            return name
    known = ", ".join(f"{name} ({' '.join(ext)})" for name, (ext, _) in FORMATS.items())
    raise UserError(f"cannot tell the format of {path} from its extension; give --format, one of: {known}")


def require(format: str) -> None:
    """A one-line `UserError` when `format` is unknown or its packages (the documents extra) are missing."""
    if format not in FORMATS:
        raise UserError(f"unknown document format {format!r}; choose one of {', '.join(FORMATS)}")
    missing = [m for m in ("sentencex", *FORMATS[format][1]) if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"format {format} needs the documents extra ({', '.join(missing)} missing): {EXTRA}")


class TextFile:
    """A text format's document with its file's byte-order mark and line endings."""

    def __init__(self, document, bom: bool, crlf: bool, binary: bool) -> None:
        self.document, self.bom, self.crlf, self.binary = document, bom, crlf, binary

    def segments(self) -> list[Segment]:
        return self.document.segments()

    def rebuild(self, outputs: Sequence[Sequence[Piece]]) -> str | bytes:
        text = self.document.rebuild(outputs)
        text = ("\ufeff" if self.bom else "") + (text.replace("\n", "\r\n") if self.crlf else text)
        return text.encode("utf-8") if self.binary else text


def read_document(
    data: str | bytes,
    format: str,
    *,
    name: str = "the document",
    attributes: bool = False,
    max_unpacked: int | None = None,
    retranslate: bool = False,
) -> Parsed:
    """`data` parsed as `format` (see the module docstring); `attributes`: html's alt and title translated too;
    `max_unpacked`: the most bytes a zipped format (docx) may unpack to (default: unpacking.py's bound);
    `retranslate`: po and xliff entries already translated are translated again."""
    require(format)
    if format == "po":  # its own charset and line endings (po.py)
        from transformer.documents.po import PoFile

        return PoFile(data, name, retranslate)
    if format == "xliff":  # XML: its own encoding (xliff.py)
        from transformer.documents.xliff import XliffFile

        return XliffFile(data, name, retranslate)
    if format == "docx":
        if isinstance(data, str):
            raise UserError("a .docx document is bytes: read the file in binary mode")
        from transformer.documents.word import WordDocument

        return WordDocument(data, name, max_unpacked)
    text = decode_utf8(data, name) if isinstance(data, bytes) else data.removeprefix("\ufeff")
    bom = data.startswith(b"\xef\xbb\xbf") if isinstance(data, bytes) else data.startswith("\ufeff")
    crlf = "\r\n" in text
    if crlf and text.count("\r") != text.count("\r\n") or crlf and text.count("\n") != text.count("\r\n"):
        raise bad_file(name, "mixes CRLF and LF line endings: convert it to one of them")
    text = text.replace("\r\n", "\n") if crlf else text
    return TextFile(_parse_text(text, format, name, attributes), bom, crlf, isinstance(data, bytes))


def _parse_text(text: str, format: str, name: str, attributes: bool):
    from transformer.documents.segments import TextDocument

    if format == "text":
        from transformer.documents.plain import parse

        return TextDocument(parse(text))
    if format == "html":
        from transformer.documents.html_doc import parse

        return parse(text, name=name, attributes=attributes)
    if format == "markdown":
        from transformer.documents.markdown_doc import parse

        return parse(text, name=name)
    from transformer.documents.subtitles import parse_srt, parse_vtt

    return (parse_srt if format == "srt" else parse_vtt)(text, name=name)
