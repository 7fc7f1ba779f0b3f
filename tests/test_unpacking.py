"""documents/unpacking.py: a .docx whose parts would unpack past a bound is refused in one line before any part is
unpacked whole, whatever its headers say; the memory its check takes is measured (tracemalloc: every allocation of
this process, zlib's output included)."""

from __future__ import annotations

import io
import tracemalloc
import zipfile

import pytest
from document_samples import docx_sample
from hostile_documents import MIB, docx_bomb

from transformer.documents.unpacking import (
    CHUNK,
    UNPACKED_FLOOR,
    UnpackedTooLargeError,
    check_unpacked,
    unpacked_limit,
)
from transformer.errors import UserError


def _peak(function, *args) -> tuple[int, BaseException | None]:
    """(the most bytes allocated at once while `function(*args)` ran, what it raised)."""
    tracemalloc.start()
    try:
        function(*args)
        raised = None
    except UserError as exc:
        raised = exc
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak, raised


def test_the_limit_is_32_times_the_files_size_and_at_least_8_mib():
    assert unpacked_limit(1000) == UNPACKED_FLOOR == 8 * MIB
    assert unpacked_limit(1_500_000) == 48_000_000


def test_a_word_file_and_data_that_is_no_zip_pass():
    check_unpacked(docx_sample(), "a.docx")
    check_unpacked(docx_bomb(4), "four.docx")  # 4 MiB of XML in 46 KB: past 32 times, within 8 MiB
    check_unpacked(b"PK\x03\x04 not a zip", "bad.docx")  # python-docx names what is wrong with it


def test_a_bomb_that_declares_its_size_is_refused_without_unpacking_a_byte():
    bomb = docx_bomb(1536)  # 1.5 GiB of paragraphs in a 4.8 MB file
    peak, raised = _peak(check_unpacked, bomb, "bomb.docx")
    assert isinstance(raised, UnpackedTooLargeError) and "\n" not in str(raised)
    assert str(raised).startswith(f"bomb.docx declares {raised.unpacked} bytes unpacked, past the limit of ")
    assert raised.unpacked > 1536 * MIB and raised.limit == 32 * len(bomb) and "zip bomb" in str(raised)
    assert peak < MIB  # the zip's directory only


@pytest.mark.parametrize("declared", [0, 100_000, 200 * MIB])
def test_a_part_that_holds_more_than_it_declares_is_refused_after_one_chunk(declared):
    """1 GiB behind a header that declares less: the count, made on the part's own bytes, stops past the declared
    size, holding one chunk at a time (a reader trusting the header would stop there too, then fail its CRC)."""
    liar = docx_bomb(1024, declared=declared)
    peak, raised = _peak(check_unpacked, liar, "liar.docx", 256 * MIB)
    expected = f"liar.docx: not a Word .docx file (its part word/document.xml unpacks to more than the {declared}"
    assert str(raised).startswith(expected) and "\n" not in str(raised)
    assert peak < 3 * CHUNK  # a chunk out and zlib's buffers: never the part


def test_parts_compressed_as_word_never_does_and_encrypted_parts_are_refused():
    for method in (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):  # unpacked a whole read at once: no bound per chunk
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", method) as archive:
            archive.writestr("word/document.xml", b"<w:document/>")
        with pytest.raises(UserError, match=f"word/document.xml is compressed with method {method}, not stored"):
            check_unpacked(buffer.getvalue(), "odd.docx")
    sample = bytearray(docx_sample())
    sample[6] |= 1  # the first part's local flag: encrypted (the directory's flag is what counts)
    directory = sample.rindex(b"PK\x01\x02", 0, sample.rindex(b"PK\x05\x06"))
    first = sample.index(b"PK\x01\x02")
    sample[first + 8] |= 1
    with pytest.raises(UserError, match="is encrypted"):
        check_unpacked(bytes(sample), "locked.docx")
    assert directory >= first


def test_a_given_limit_replaces_the_default():
    with pytest.raises(UnpackedTooLargeError, match=r"past the limit of 1000000 \(the limit given\)"):
        check_unpacked(docx_bomb(4), "four.docx", 1_000_000)
