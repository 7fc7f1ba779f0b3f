"""Documents through the server: POST /translate_file (LibreTranslate's file upload) and `format: html` in POST
/translate, each translated by transformer.documents (markup kept, inline tags placed by word alignment) with this
server's model, its sentences decoded by the batcher with the other requests' lines.

A document goes in three steps, none of which holds the event loop or a thread while it waits:
1. read and cut into sentences in a worker thread (`prepare_document`); a document that is not of its format
   (invalid UTF-8, broken markup, a corrupt .docx) is a 400 with the documents package's one line;
2. its sentences decoded through `Service.decode`, with alignments where the model reads them (one model; an
   ensemble's tags are placed by the proportional guess of docs/documents.md). A file's go a request's worth
   (--max-lines sentences) at a time, each waiting for its turn (and for room in a full queue) as a request does:
   so a long file shares the decoder's rounds with every other request instead of holding it, and its deadline
   (--file-timeout-s) is obeyed: past it, 504 and no more of its sentences are decoded;
3. rebuilt from the translations in a worker thread.
A file's format comes from its extension (`FILE_FORMATS`); the translated file is kept in the server's file store
(file_store.py) under its key, `<id>.<name>` with `name` the upload's own name made safe (`download_name`).
Protected spans are kept as written in files and html items alike (protected.py's fields); gettext .po/.pot and
XLIFF files get their untranslated entries translated and marked for review (docs/documents.md).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import re
import unicodedata
import zipfile

from fastapi import Request

from transformer.documents import FORMATS, PreparedDocument, prepare_document, require
from transformer.documents.spans import PROTECT, Protection
from transformer.errors import UserError
from transformer.serving.engine import Settings
from transformer.serving.libretranslate import check_file_fields
from transformer.serving.protected import request_protection
from transformer.serving.requests import ApiError, check_lines
from transformer.serving.service import Service, off_loop

FILE_FORMATS = {extension: name for name, (extensions, _) in FORMATS.items() for extension in extensions}
MEDIA_TYPES = {  # a format's Content-Type when its file is downloaded
    "text": "text/plain; charset=utf-8",
    "html": "text/html; charset=utf-8",
    "markdown": "text/markdown; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "po": "text/x-gettext-translation; charset=utf-8",  # a catalogue in another charset names it in its header
    "xliff": "application/xliff+xml",
}
NAME_CHARS = 100  # the longest download name kept from an upload's name (its extension added)
UNPACKED_RATIO = 32  # a .docx (a zip) may unpack to at most this many times --max-file-bytes: no zip bomb


@functools.cache
def file_formats() -> tuple[str, ...]:
    """The extensions POST /translate_file takes: those of the formats whose packages are installed."""
    available = []
    for extension, format in FILE_FORMATS.items():
        try:
            require(format)
        except UserError:
            continue
        available.append(extension)
    return tuple(available)


def download_name(filename: str) -> str:
    """An upload's name made safe for a URL and a header, as LibreTranslate's (werkzeug's secure_filename) is: its
    last path part in ASCII letters, digits, `.`, `-` and `_` (spaces as `_`), or `document` + its extension."""
    base = re.split(r"[/\\]", filename)[-1]
    stem, extension = os.path.splitext(base)
    plain = unicodedata.normalize("NFKD", stem).encode("ascii", "ignore").decode("ascii")
    stem = re.sub(r"[^A-Za-z0-9._-]", "", "_".join(plain.split())).strip("._")[:NAME_CHARS]
    return (stem or "document") + extension.lower()


def upload_format(filename: str) -> str:
    """The format of an uploaded file from its extension; LibreTranslate's 400 (with the ones taken) otherwise."""
    extension = os.path.splitext(re.split(r"[/\\]", filename)[-1])[1].lower()
    if extension not in file_formats():
        taken = " ".join(file_formats())
        raise ApiError(400, f"Invalid request: file format not supported ({extension or 'no extension'}; {taken})")
    return FILE_FORMATS[extension]


def check_unpacked(data: bytes, name: str, limit: int) -> None:
    """A 413 when the zip `data` declares more than `limit` bytes unpacked (Python's zipfile never unpacks a member
    past its declared size). A file that is no zip is left to the documents package to name."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(member.file_size for member in archive.infolist())
    except Exception:  # not a zip, or a broken one: the documents package's 400 says so
        return
    if unpacked > limit:
        ratio = f"{UNPACKED_RATIO} x --max-file-bytes"
        raise ApiError(413, f"File too large: {name} unpacks to {unpacked} bytes, the limit is {limit} ({ratio})")


def prepare(
    service: Service, data: str | bytes, format: str, name: str, protection: Protection = PROTECT
) -> PreparedDocument:
    """`data` read as a `format` document and cut into sentences the model takes, `protection`'s spans kept as
    written; a 400 when it is not of its format. CPU work on up to a whole file: run off the event loop."""
    engine = service.engine

    def fits(sentence: str) -> bool:
        return engine.source_tokens([sentence])[0] <= engine.max_positions

    try:
        return prepare_document(data, format, fits, language=engine.languages[0], name=name, protection=protection)
    except UserError as exc:
        raise ApiError(400, f"Invalid request: {exc}") from None


def _pairs(results: list[list], k: int = 0) -> list[tuple[str, list | None]]:
    """(text, alignment) of each sentence's k-th hypothesis (its last where it has fewer)."""
    chosen = [hyps[min(k, len(hyps) - 1)] for hyps in results]
    return [(hyp.text, hyp.alignment) for hyp in chosen]


async def translate_html(
    service: Service, request: Request, items: list[tuple[str, str]], settings: Settings
) -> list[list[str]]:
    """`format: html`: each (name, item) translated as an HTML document, `settings.nbest` times (the best, then each
    alternative), its sentences within --max-lines and --max-chars (400) and decoded in one request's turns."""
    limits = service.serve.max_lines, service.serve.max_chars

    def plan() -> list[PreparedDocument]:
        prepared = [prepare(service, item, "html", name, settings.protection) for name, item in items]
        check_lines([sentence for document in prepared for sentence in document.sentences], *limits)
        return prepared

    prepared = await off_loop(plan)
    sentences = [sentence for document in prepared for sentence in document.sentences]
    settings = dataclasses.replace(settings, alignment=service.engine.attends)
    results = await service.decode(request, sentences, settings)

    def rebuild() -> list[list[str]]:
        texts, start = [], 0
        for document in prepared:
            own = results[start : start + len(document.sentences)]
            start += len(document.sentences)
            texts.append([document.rebuild(_pairs(own, k)) for k in range(settings.nbest)])
        return texts

    return await off_loop(rebuild)


async def translate_file(service: Service, request: Request) -> str:
    """POST /translate_file: the uploaded file translated and kept in the file store; its key there."""
    fields = await service.upload(request)
    upload = check_file_fields(fields, service.engine.languages)
    protection = request_protection(fields)
    limit = service.serve.max_file_bytes
    if len(upload.data) > limit:
        raise ApiError(413, f"File too large: {len(upload.data)} bytes, the limit is {limit} (--max-file-bytes)")
    format, name = upload_format(upload.filename), download_name(upload.filename)

    def read() -> PreparedDocument:
        if format == "docx":
            check_unpacked(upload.data, name, UNPACKED_RATIO * limit)
        return prepare(service, upload.data, format, name, protection)

    prepared = await off_loop(read)
    settings = Settings(alignment=service.engine.attends)
    results, size = [], service.serve.max_lines
    for start in range(0, len(prepared.sentences), size):
        lines = prepared.sentences[start : start + size]
        results += await service.decode(request, lines, settings, patient=start > 0)
    data = await off_loop(prepared.rebuild, _pairs(results))
    key = service.files.put(name, data, MEDIA_TYPES[format])
    if key is None:
        store = service.files.max_bytes
        raise ApiError(
            413, f"Translated file too large: {len(data)} bytes, the file store holds {store} (--file-store-bytes)"
        )
    return key
