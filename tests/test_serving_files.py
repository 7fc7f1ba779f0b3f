"""LibreTranslate's file translation end to end: the real server (`python -m transformer serve`) on the tiny trained
checkpoint of tests/tiny_checkpoint.py, on a free loopback port. A file of each format is uploaded, downloaded and
read back by its own format's parser: the same structure (subtitle timings, HTML tags, Markdown blocks, Word
paragraphs and tables) around translated text, and the same bytes as the Python API's `translate_document` on the
same checkpoint. A large file is translated while another client's ordinary request is answered within seconds.
Bad uploads get their 4xx and leave no traceback in the server's log."""

from __future__ import annotations

import io
import re
import threading
import time
from collections import Counter

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("multipart")
pytest.importorskip("sentencex")

from document_samples import EXTENSIONS, sample  # noqa: E402
from serve_client import Served, call, download, upload  # noqa: E402
from tiny_checkpoint import build_trained, sentences  # noqa: E402

pytestmark = pytest.mark.slow
LANGS = {"source": "xx", "target": "yy"}
LARGE_SENTENCES = 2000  # several seconds of decoding for the tiny model on one thread


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_trained(tmp_path_factory.mktemp("served"), norm_first=False, activation="relu")


@pytest.fixture(scope="module")
def oracle(checkpoint):
    from transformer import Translator

    return Translator.from_checkpoint(checkpoint)


@pytest.fixture(scope="module")
def server(checkpoint, tmp_path_factory):
    args = ["--checkpoint", str(checkpoint), "--max-file-bytes", "400000"]
    served = Served(args, tmp_path_factory.mktemp("log") / "server.log")
    yield served
    assert served.stop() == 0
    assert "Traceback" not in served.log.read_text(encoding="utf-8")


def translated(server, name: str, data: bytes) -> tuple[dict, bytes]:
    status, _, answer = upload(server.port, name, data, LANGS)
    assert status == 200, answer
    status, headers, body = download(server.port, answer["translatedFileUrl"])
    assert status == 200
    return headers, body


def structure(format: str, data: bytes):
    """What a translation must keep of a file, read by the format's own parser."""
    if format == "text":
        return re.findall(r"\n(?:[ \t]*\n)+", data.decode())  # the blank lines between paragraphs
    if format == "html":
        return Counter(re.findall(r"<[^>]*>", data.decode()))  # the multiset of tags, attributes and all
    if format == "markdown":
        from markdown_it import MarkdownIt

        return [(t.type, t.tag, t.markup) for t in MarkdownIt("commonmark").enable("table").parse(data.decode())]
    if format == "srt":
        import srt

        return [(cue.index, cue.start, cue.end) for cue in srt.parse(data.decode())]
    if format == "vtt":
        import webvtt

        return [(cue.start, cue.end) for cue in webvtt.from_buffer(io.StringIO(data.decode()))]
    if format == "po":
        import polib

        return [(e.msgctxt, e.msgid, e.occurrences) for e in polib.pofile(data.decode())]
    if format == "xliff":
        return re.findall(r"<(?:trans-unit|source)[^>]*>", data.decode())  # the units and their sources' tags
    import docx

    document = docx.Document(io.BytesIO(data))
    runs = [sorted({bool(run.bold) for run in p.runs}) for p in document.paragraphs]  # runs follow the words
    return runs, len(document.tables), [p.style.name for p in document.paragraphs]


def docx_texts(data: bytes) -> list[str]:
    """A Word file's texts: body paragraphs, table cells, header (its zip's timestamps aside)."""
    import docx

    document = docx.Document(io.BytesIO(data))
    cells = [cell.text for table in document.tables for row in table.rows for cell in row.cells]
    header = [p.text for p in document.sections[0].header.paragraphs]
    return [p.text for p in document.paragraphs] + cells + header


@pytest.mark.parametrize("format", list(EXTENSIONS))
def test_each_format_comes_back_translated_with_its_structure_as_the_python_api_translates_it(server, oracle, format):
    data = sample(format)
    data = data.encode("utf-8") if isinstance(data, str) else data
    headers, body = translated(server, f"sample.{EXTENSIONS[format]}", data)
    assert headers["content-disposition"] == f'attachment; filename="sample.{EXTENSIONS[format]}"'
    assert body != data and structure(format, body) == structure(format, data)
    expected = oracle.translate_document(data, format)
    if format == "docx":  # a new zip: its members' timestamps are the time it was written
        assert docx_texts(body) != docx_texts(data)
        body, expected = docx_texts(body), docx_texts(expected)
    assert body == expected


def test_an_ordinary_request_is_answered_within_seconds_while_a_large_file_is_translated(server, oracle):
    lines = sentences(LARGE_SENTENCES, seed=21)
    document = "".join(f"{line}.\n\n" for line in lines).encode("utf-8")
    answers = {}
    thread = threading.Thread(target=lambda: answers.setdefault("file", translated(server, "large.txt", document)))
    thread.start()
    while call(server.port, "GET", "/health")[2]["queue_lines"] == 0:  # the file's sentences are being decoded
        assert thread.is_alive(), "the file was answered before any of it was decoded"
        time.sleep(0.02)
    start = time.monotonic()
    status, _, answer = call(server.port, "POST", "/translate", {"q": "the red cat sat", **LANGS})
    waited = time.monotonic() - start
    file_in_flight = thread.is_alive()
    assert status == 200 and answer == {"translatedText": oracle.translate(["the red cat sat"])[0]}
    assert waited < 5.0 and file_in_flight, (waited, file_in_flight)
    thread.join(120)
    _, body = answers["file"]
    paragraphs = body.decode().split("\n\n")
    assert len(paragraphs) == LARGE_SENTENCES + 1 and all(p.strip() for p in paragraphs[:-1])


@pytest.mark.parametrize(
    "name, data, status",
    [
        ("a.pdf", b"%PDF-1.4", 400),
        ("a.txt", b"\xff\xfe", 400),
        ("a.html", b"<p>sin <b", 400),
        ("a.srt", b"1\nnot a time\nhola\n", 400),
        ("a.docx", b"PK\x03\x04 broken", 400),
        ("a.txt", b"x" * 400_001, 413),
    ],
)
def test_bad_uploads_get_their_4xx_and_the_server_goes_on(server, name, data, status):
    got, _, answer = upload(server.port, name, data, LANGS)
    assert got == status and answer["error"] and "Traceback" not in answer["error"]
    assert call(server.port, "GET", "/download_file/" + "0" * 32 + ".a.txt")[0] == 404
    assert call(server.port, "GET", "/health")[0] == 200
