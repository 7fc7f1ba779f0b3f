"""Hostile documents built in memory for the tests: .docx zip bombs (tests/test_unpacking.py, test_documents_cli.py,
test_serving_uploads.py) and Markdown nested past the parser's limit. A bomb of 1.5 GiB is a 1.5 MB file built in a
second: its word/document.xml is one deflated megabyte repeated (each copy stands alone after a full flush)."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

from document_samples import docx_sample

W = b'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
HEAD = b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document ' + W + b"><w:body>"
PARAGRAPH = b"<w:p><w:r><w:t>The big dog ran home.</w:t></w:r></w:p>"
TAIL = b"</w:body></w:document>"
MIB = 1 << 20


def _repeated(copies: int) -> tuple[bytes, int, int]:
    """(raw deflate, CRC-32, size) of HEAD + (a MiB of PARAGRAPHs) * copies + TAIL, one copy compressed."""
    chunk = PARAGRAPH * (MIB // len(PARAGRAPH))
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = deflate.compress(HEAD) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    last = deflate.compress(TAIL) + deflate.flush()
    crc = zlib.crc32(HEAD)
    for _ in range(copies):
        crc = zlib.crc32(chunk, crc)
    return first + block * copies + last, zlib.crc32(TAIL, crc), len(HEAD) + len(chunk) * copies + len(TAIL)


def _zip(parts: list[tuple[str, bytes, int, int, int]]) -> bytes:
    """A zip written by hand from (name, raw deflate, CRC-32, declared size, method) parts."""
    out, directory = io.BytesIO(), []
    for name, packed, crc, size, method in parts:
        offset, encoded = out.tell(), name.encode()
        sizes = (crc, len(packed), size, len(encoded))
        out.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 0x21, *sizes, 0) + encoded + packed)
        entry = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, method, 0, 0x21, *sizes, 0, 0, 0, 0, 0, offset)
        directory.append(entry + encoded)
    start, listing = out.tell(), b"".join(directory)
    out.write(listing + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(parts), len(parts), len(listing), start, 0))
    return out.getvalue()


def docx_bomb(mib: int, declared: int | None = None) -> bytes:
    """The sample .docx with a word/document.xml of `mib` MiB of paragraphs, declaring its true size, or `declared`
    bytes (a header that lies)."""
    parts = []
    with zipfile.ZipFile(io.BytesIO(docx_sample(with_header=False))) as sample:
        for info in sample.infolist():
            if info.filename == "word/document.xml":
                packed, crc, size = _repeated(mib)
                parts.append((info.filename, packed, crc, size if declared is None else declared, zipfile.ZIP_DEFLATED))
                continue
            raw = sample.read(info)
            deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
            parts.append((info.filename, deflate.compress(raw) + deflate.flush(), zlib.crc32(raw), len(raw), 8))
    return _zip(parts)


def nested_markdown(depth: int) -> str:
    """A quote holding a list item holding a quote ..., `depth` times a quote and an item (three of the Markdown
    parser's levels each: the quote, the list, the item), a sentence inside, and one after."""
    return "> - " * depth + "The deepest sentence.\n\nA sentence after it.\n"
