"""POST /translate_file and GET /download_file (transformer/serving/documents.py, file_store.py) over scripted
engines, served in-process on a loopback port: a file of each format comes back byte for byte from an engine that
changes nothing, under its own name and Content-Type; every bad upload is a 4xx with LibreTranslate's or the
documents package's one line; the limits (upload size, the store's bytes, a file's time in it, its deadline) each
answer what docs/serving.md says; a file's sentences go to the decoder a request's worth at a time. The real model
over the real server: tests/test_serving_files.py."""

from __future__ import annotations

import io
import re
import time
import zipfile

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("multipart")
pytest.importorskip("sentencex")

from document_samples import EXTENSIONS, TRANSLATION_FILES, sample  # noqa: E402
from hostile_documents import MIB, docx_bomb  # noqa: E402
from serve_client import EchoEngine, ScriptedEngine, call, download, in_process, raw, upload  # noqa: E402

from transformer.config import ServeConfig  # noqa: E402
from transformer.decoding.streaming import Translation  # noqa: E402

LANGS = {"source": "es", "target": "en"}
MEDIA = {
    "text": "text/plain; charset=utf-8",
    "html": "text/html; charset=utf-8",
    "markdown": "text/markdown; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "po": "text/x-gettext-translation; charset=utf-8",  # the server's label of text (a catalogue names its own)
    "xliff": "application/xliff+xml",
}
DONE = {  # a catalogue whose entries are all translated: nothing for the model to do
    "po": b'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\nmsgid "Open %s"\nmsgstr "Abrir %s"\n',
    "xliff": b'<xliff version="1.2"><file><body><trans-unit id="1"><source>Open</source><target>Abrir</target>'
    b"</trans-unit></body></file></xliff>\n",
}


@pytest.fixture(scope="module")
def echo():
    engine = EchoEngine()
    with in_process(engine, ServeConfig(batch_wait_ms=0, max_file_bytes=100_000)) as port:
        yield engine, port


def translated(port, name, data, **fields):
    """The file's translation as downloaded: (its URL, the download's headers, its bytes)."""
    status, _, answer = upload(port, name, data, {**LANGS, **fields})
    assert status == 200 and set(answer) == {"translatedFileUrl"}, answer
    url = answer["translatedFileUrl"]
    status, headers, body = download(port, url)
    assert status == 200
    return url, headers, body


@pytest.mark.parametrize("format", list(EXTENSIONS))
def test_a_file_that_the_model_leaves_unchanged_comes_back_byte_for_byte_under_its_own_name(echo, format):
    engine, port = echo
    data = DONE[format] if format in TRANSLATION_FILES else sample(format)  # a catalogue's targets would be filled
    data = data.encode("utf-8") if isinstance(data, str) else data
    url, headers, body = translated(port, f"my report ñ.{EXTENSIONS[format]}", data)
    name = f"my_report_n.{EXTENSIONS[format]}"  # as LibreTranslate's secure_filename makes it
    assert re.fullmatch(rf"http://127\.0\.0\.1:{port}/download_file/[0-9a-f]{{32}}\.{re.escape(name)}", url)
    assert headers["content-type"] == MEDIA[format]
    assert headers["content-disposition"] == f'attachment; filename="{name}"'
    assert body == data


def test_the_settings_say_that_files_are_translated_and_which(echo):
    settings = call(echo[1], "GET", "/frontend/settings")[2]
    assert settings["filesTranslation"] is True
    assert {".txt", ".html", ".htm", ".md", ".srt", ".vtt", ".docx"} <= set(settings["supportedFilesFormat"])


def test_a_files_sentences_go_to_the_decoder_a_requests_worth_at_a_time():
    engine = ScriptedEngine()
    with in_process(engine, ServeConfig(batch_wait_ms=0, max_lines=3)) as port:
        text = "".join(f"Frase {n}.\n\n" for n in range(7))
        _, _, body = translated(port, "a.txt", text)
        assert body.decode() == text.upper()
        assert [len(lines) for lines in engine.calls] == [3, 3, 1]  # --max-lines sentences a turn


BAD_UPLOADS = [  # (file name, content, fields, the error)
    ("a.txt", "hola", {"target": "en"}, "Invalid request: missing source parameter"),
    ("a.txt", "hola", {"source": "es"}, "Invalid request: missing target parameter"),
    ("a.txt", "hola", {"source": "de", "target": "en"}, "'de' is not supported"),
    ("a.txt", "hola", {"source": "es", "target": "fr"}, "'fr' is not supported"),
    ("a.pdf", "%PDF-1.4", LANGS, "Invalid request: file format not supported (.pdf; .txt"),
    ("README", "hola", LANGS, "Invalid request: file format not supported (no extension;"),
    ("a.txt", b"bien\n\xff\xfe mal\n", LANGS, "Invalid request: a.txt line 2 is not valid UTF-8"),
    ("a.html", "<p>ok</p>\n<p>sin <b", LANGS, "Invalid request: a.html: line 2: a tag or comment that never ends"),
    ("a.html", "<p><b><i>x</b></i></p>", LANGS, "a.html: line 1: </b> closes <b> while <i> inside it is still open"),
    ("a.srt", "1\n00:00:0x,000 --> 00:00:02,000\nhola\n", LANGS, "a.srt: line 2: not an SRT time"),
    ("a.vtt", "00:01.000 --> 00:02.000\nhola\n", LANGS, "a.vtt: not a valid WebVTT file"),
    ("a.docx", b"PK\x03\x04 not really a zip", LANGS, "Invalid request: a.docx: not a Word .docx file"),
    ("a.md", "a\r\nb\nc\r\n", LANGS, "a.md: mixes CRLF and LF line endings"),
]


@pytest.mark.parametrize("name, data, fields, message", BAD_UPLOADS)
def test_a_bad_upload_is_a_400_with_one_line(echo, name, data, fields, message):
    engine, port = echo
    before = len(engine.calls)
    status, headers, answer = upload(port, name, data, fields)
    assert status == 400 and message in answer["error"] and "\n" not in answer["error"], answer
    assert len(engine.calls) == before and "x-request-id" in headers


def test_a_body_that_is_not_one_file_part_is_a_400(echo):
    port = echo[1]
    status, _, answer = call(port, "POST", "/translate_file", {"file": "a.txt", **LANGS})
    assert status == 400 and "multipart/form-data" in answer["error"]
    status, _, answer = upload(port, "a.txt", "hola", LANGS, file_field="document")
    assert (status, answer["error"]) == (400, "Invalid request: missing file parameter")
    status, _, answer = upload(port, "", "hola", LANGS)
    assert (status, answer["error"]) == (400, "Invalid request: empty file")
    body = (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nuno\r\n'
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="b.txt"\r\n\r\ndos\r\n--b--\r\n'
    )
    status, _, answer = call(
        port, "POST", "/translate_file", body, headers={"Content-Type": "multipart/form-data; boundary=b"}
    )
    assert (status, answer["error"]) == (400, "Invalid request: one file at a time")


def test_a_file_over_the_upload_limit_is_a_413_before_or_after_its_body_is_read():
    with in_process(EchoEngine(), ServeConfig(batch_wait_ms=0, max_file_bytes=100)) as port:
        assert upload(port, "a.txt", "x" * 100, LANGS)[0] == 200
        status, _, answer = upload(port, "a.txt", "x" * 101, LANGS)
        assert (status, answer["error"]) == (413, "File too large: 101 bytes, the limit is 100 (--max-file-bytes)")
        head = b"POST /translate_file HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
        answer = raw(port, head + b"Content-Length: 999999999\r\n\r\n", half_close=False)
        assert answer.startswith(b"HTTP/1.1 413") and b"--max-file-bytes" in answer


def test_a_docx_that_would_unpack_past_32_times_the_upload_limit_is_a_413_before_it_is_read():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"\0" * 3_300_000)  # a few KB packed: a zip bomb in miniature
    with in_process(EchoEngine(), ServeConfig(batch_wait_ms=0, max_file_bytes=100_000)) as port:
        status, _, answer = upload(port, "bomb.docx", buffer.getvalue(), LANGS)
        assert status == 413 and answer["error"] == (
            "File too large: bomb.docx unpacks to 3300000 bytes, the limit is 3200000 (32 x --max-file-bytes)"
        )
        assert upload(port, "a.docx", sample("docx"), LANGS)[0] == 200


def test_a_docx_whose_part_holds_more_than_it_declares_is_a_400_read_a_chunk_at_a_time():
    """800 kB holding 256 MiB behind a header that declares 100 kB: the shared check (documents/unpacking.py)
    counts the part's own bytes and stops past what it declares; the server's memory meanwhile (tracemalloc, its
    threads included) holds the upload and a chunk, not the 256 MiB."""
    import tracemalloc

    liar = docx_bomb(256, declared=100_000)
    with in_process(EchoEngine(), ServeConfig(batch_wait_ms=0, max_file_bytes=1 << 20)) as port:
        tracemalloc.start()
        try:
            status, _, answer = upload(port, "liar.docx", liar, LANGS)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert upload(port, "a.docx", sample("docx"), LANGS)[0] == 200
    part = "its part word/document.xml unpacks to more than the 100000 bytes it declares"
    assert (status, answer["error"]) == (400, f"Invalid request: liar.docx: not a Word .docx file ({part})")
    assert peak < 16 * MIB


def test_unknown_and_expired_files_are_404():
    with in_process(EchoEngine(), ServeConfig(batch_wait_ms=0, file_ttl_s=1.5)) as port:
        for name in ["nothing.txt", "0" * 32 + ".a.txt", "..", "%2e%2e%2fetc%2fpasswd", "../../etc/passwd"]:
            status, _, answer = call(port, "GET", f"/download_file/{name}")
            assert status == 404 and answer["error"]  # a key is looked up in memory, never a path on the disk
        status, _, answer = call(port, "GET", "/download_file/nothing.txt")
        assert answer["error"] == "File not found: no such file, or it has expired (files are kept 1.5 s, --file-ttl-s)"
        status, _, answer = upload(port, "a.txt", "hola", LANGS)
        stored = time.monotonic()
        assert download(port, answer["translatedFileUrl"])[0] == 200
        time.sleep(max(0.0, stored + 1.6 - time.monotonic()))
        status, _, body = download(port, answer["translatedFileUrl"])
        assert status == 404 and b"(files are kept 1.5 s, --file-ttl-s)" in body


def test_past_the_stores_bytes_the_oldest_file_goes_first():
    serve = ServeConfig(batch_wait_ms=0, max_file_bytes=100, file_store_bytes=250)
    with in_process(EchoEngine(), serve) as port:
        urls = [upload(port, f"{n}.txt", f"{n}" * 100, LANGS)[2]["translatedFileUrl"] for n in range(3)]
        assert [download(port, url)[0] for url in urls] == [404, 200, 200]


class DoublingEngine(ScriptedEngine):
    def decode(self, settings, lines, controls):
        return [[Translation(f"{line} {line}", -1.0, -1.0, [1])] for line in lines]


def test_a_translation_larger_than_the_whole_store_is_a_413():
    serve = ServeConfig(batch_wait_ms=0, max_file_bytes=100, file_store_bytes=150)
    with in_process(DoublingEngine(), serve) as port:
        status, _, answer = upload(port, "a.txt", "palabra " * 12, LANGS)
        assert status == 413 and answer["error"].endswith("the file store holds 150 (--file-store-bytes)")


def test_a_file_not_translated_by_its_deadline_is_a_504_and_the_server_goes_on():
    engine = ScriptedEngine()
    engine.gate.clear()  # the decoder is held: the file cannot be done in time
    serve = ServeConfig(batch_wait_ms=0, file_timeout_s=1.0, request_timeout_s=20.0)
    with in_process(engine, serve) as port:
        start = time.monotonic()
        status, _, answer = upload(port, "a.txt", "Hola.\n\nAdiós.\n", LANGS)
        assert status == 504 and "not translated within 1 s (--file-timeout-s)" in answer["error"]
        assert time.monotonic() - start < 10
        engine.gate.set()
        assert call(port, "POST", "/translate", {"q": "sigue", **LANGS})[::2] == (200, {"translatedText": "SIGUE"})


def test_with_keys_an_upload_needs_one_and_a_download_needs_only_its_url():
    with in_process(EchoEngine(), ServeConfig(batch_wait_ms=0), keys=frozenset({"k1"})) as port:
        assert upload(port, "a.txt", "hola", LANGS)[::2] == (
            400,
            {"error": "Please contact the server operator to get an API key"},
        )
        assert upload(port, "a.txt", "hola", {**LANGS, "api_key": "k2"})[::2] == (403, {"error": "Invalid API key"})
        status, _, answer = upload(port, "a.txt", "hola", {**LANGS, "api_key": "k1"})
        assert status == 200 and download(port, answer["translatedFileUrl"])[::2] == (200, b"hola")
