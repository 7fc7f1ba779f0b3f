"""A zipped document (a .docx) checked before any reader unpacks it: its parts unpack within a bound (no zip bomb).

`check_unpacked(data, name, limit)` refuses, in one line, a package whose parts would unpack to more than `limit`
bytes in all, in two steps that hold a few `CHUNK`s of bytes at most (2 MiB measured), never a part:
1. the sizes its zip directory declares, summed: a bomb that declares what it holds is refused without unpacking a
   byte (a 1.5 MB file declaring 1.5 GiB costs nothing);
2. a streaming count of what each part's data really unpacks to, read from the part's own bytes with zlib (not
   through a reader that trusts the header), a chunk at a time, dropped, and stopped as soon as it passes the size
   the part declares: a part that holds more than it declares is refused there. So the reader that comes after
   (python-docx, through Python's `zipfile`) unpacks no more than the declared sizes that step 1 bounded.
Parts compressed otherwise than Word writes them (stored or deflated: bzip2 and LZMA unpack a whole read at once,
unbounded) and encrypted parts are refused too. The limit: `UNPACKED_RATIO` times the file's own size, at least
`UNPACKED_FLOOR` (word/document.xml packs about 5 to 15 times: a real document is far inside it), unless the caller
gives one (transformer-serve: 32 x --max-file-bytes). Memory measured: docs/documents.md, "Hostile documents".
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

from transformer.documents.segments import bad_file
from transformer.errors import UserError

UNPACKED_RATIO = 32  # a package may unpack to this many times its own size
UNPACKED_FLOOR = 8 << 20  # ... or to this many bytes, whichever is more
CHUNK = 1 << 20  # bytes unpacked at a time while counting
PACKED_CHUNK = 1 << 16  # packed bytes handed to zlib at a time (what it has not used yet is copied: keep it small)
RULE = f"{UNPACKED_RATIO} times its size, at least {UNPACKED_FLOOR >> 20} MiB"  # the default limit, in words
LOCAL_HEADER = struct.Struct("<4s22xHH")  # a part's local header: signature, ..., its name's and extra field's lengths


class UnpackedTooLargeError(UserError):
    """A package whose parts declare more than `limit` bytes unpacked (`unpacked`)."""

    def __init__(self, name: str, unpacked: int, limit: int, because: str) -> None:
        self.name, self.unpacked, self.limit = name, unpacked, limit
        super().__init__(
            f"{name} declares {unpacked} bytes unpacked, past the limit of {limit} ({because}): refused as a likely "
            "zip bomb; a real document that large must be split"
        )


def unpacked_limit(size: int) -> int:
    """The most bytes a package of `size` bytes may unpack to (see the module docstring)."""
    return max(UNPACKED_FLOOR, UNPACKED_RATIO * size)


def check_unpacked(data: bytes, name: str, limit: int | None = None) -> None:
    """`UnpackedTooLargeError` when the zip `data` declares more than `limit` bytes unpacked (default:
    `unpacked_limit`), a one-line `UserError` for a part that unpacks past what it declares or that Word would not
    write; see the module docstring. Data that is no zip is left to the reader to name."""
    because = RULE if limit is None else "the limit given"
    limit = unpacked_limit(len(data)) if limit is None else limit
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError):
        return
    declared = sum(member.file_size for member in members)
    if declared > limit:
        raise UnpackedTooLargeError(name, declared, limit, because)
    view = memoryview(data)
    for member in members:
        what = f"not a Word .docx file (its part {member.filename}"
        if member.flag_bits & 1:
            raise bad_file(name, f"{what} is encrypted)")
        if member.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise bad_file(name, f"{what} is compressed with method {member.compress_type}, not stored or deflated)")
        if _unpacks_past(_packed(view, member, what, name), member) > member.file_size:
            raise bad_file(name, f"{what} unpacks to more than the {member.file_size} bytes it declares)")


def _packed(view: memoryview, member: zipfile.ZipInfo, what: str, name: str) -> memoryview:
    """The part's packed bytes, found through its local header (a view: nothing copied)."""
    start = member.header_offset
    header = view[start : start + LOCAL_HEADER.size]
    if len(header) < LOCAL_HEADER.size or LOCAL_HEADER.unpack(header)[0] != zipfile.stringFileHeader:
        raise bad_file(name, f"{what} has no local header where the directory says)")
    name_length, extra_length = LOCAL_HEADER.unpack(header)[1:]
    begin = start + LOCAL_HEADER.size + name_length + extra_length
    return view[begin : begin + member.compress_size]


def _unpacks_past(packed: memoryview, member: zipfile.ZipInfo) -> int:
    """The bytes `packed` unpacks to, counted `CHUNK` at a time and dropped; the count stops once past the size the
    part declares (a broken stream counts as what it gave before the error)."""
    if member.compress_type == zipfile.ZIP_STORED:
        return len(packed)
    inflater, unpacked = zlib.decompressobj(-zlib.MAX_WBITS), 0  # raw deflate, as zip stores it
    try:
        for offset in range(0, len(packed), PACKED_CHUNK):
            pending = packed[offset : offset + PACKED_CHUNK]
            while pending and not inflater.eof:
                unpacked += len(inflater.decompress(pending, CHUNK))
                if unpacked > member.file_size:
                    return unpacked
                pending = inflater.unconsumed_tail
    except zlib.error:
        pass  # a broken stream: the reader names it
    return unpacked
