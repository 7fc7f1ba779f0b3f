"""Documents through the server: POST /translate_file (LibreTranslate's file upload) and `format: html` in POST
/translate, each translated by transformer.documents (markup kept, inline tags placed by word alignment) through
the request's route (one model, or two through the pivot: alignments composed, routing.py), its sentences decoded
by the batchers with the other requests' lines. A file with `source: auto` is cut into sentences first, and its
language detected from them (their first detection.DETECT_CHARS characters).

A document goes in three steps, none of which holds the event loop or a thread while it waits:
1. read and cut into sentences in a worker thread (`prepare_document`); a document that is not of its format
   (invalid UTF-8, broken markup, a corrupt .docx) is a 400 with the documents package's one line;
2. its sentences decoded through its route (`decode_route`), with alignments where the models read them (an
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
import os
import re
import unicodedata

from fastapi import Request

from transformer.documents import FORMATS, PreparedDocument, prepare_document, require
from transformer.documents.spans import PROTECT, Protection
from transformer.documents.unpacking import UnpackedTooLargeError
from transformer.errors import UserError
from transformer.serving.engine import Settings
from transformer.serving.libretranslate import check_file_fields
from transformer.serving.protected import request_protection
from transformer.serving.registry import Model
from transformer.serving.requests import ApiError, check_lines
from transformer.serving.routing import decode_route, resolve
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


def prepare(
    engine,
    data: str | bytes,
    format: str,
    name: str,
    language: str | None = None,
    *,
    max_unpacked: int = 0,
    protection: Protection = PROTECT,
) -> PreparedDocument:
    """`data` read as a `format` document and cut into sentences that `engine` (a route's first model) takes, by
    the sentence splitter of `language` (default: the engine's source), `protection`'s spans kept as written; a 400
    when it is not of its format, a 413 for a .docx whose parts declare more than `max_unpacked` bytes unpacked (and
    a 400 for one whose part unpacks past what it declares: documents/unpacking.py, before any part is unpacked
    whole). CPU work on up to a whole file: run off the event loop."""

    def fits(sentence: str) -> bool:
        return engine.source_tokens([sentence])[0] <= engine.max_positions

    try:
        language = language or engine.languages[0]
        options = dict(language=language, name=name, max_unpacked=max_unpacked or None, protection=protection)
        return prepare_document(data, format, fits, **options)
    except UnpackedTooLargeError as exc:
        ratio = f"{UNPACKED_RATIO} x --max-file-bytes"
        detail = f"{name} unpacks to {exc.unpacked} bytes, the limit is {max_unpacked} ({ratio})"
        raise ApiError(413, f"File too large: {detail}") from None
    except UserError as exc:
        raise ApiError(400, f"Invalid request: {exc}") from None


def _attends(route: tuple[Model, ...]) -> bool:
    """Whether every model of a route reads word alignments (one model each; an ensemble does not)."""
    return all(model.engine.attends for model in route)


def _pairs(results: list[list], k: int = 0) -> list[tuple[str, list | None]]:
    """(text, alignment) of each sentence's k-th hypothesis (its last where it has fewer)."""
    chosen = [hyps[min(k, len(hyps) - 1)] for hyps in results]
    return [(hyp.text, hyp.alignment) for hyp in chosen]


async def translate_html(
    service: Service, request: Request, route: tuple[Model, ...], items: list[tuple[str, str]], settings: Settings
) -> list[list[str]]:
    """`format: html`: each (name, item) translated as an HTML document, `settings.nbest` times (the best, then each
    alternative), its sentences within --max-lines and --max-chars (400) and decoded in one request's turns."""
    limits = service.serve.max_lines, service.serve.max_chars

    def plan() -> list[PreparedDocument]:
        prepared = [
            prepare(route[0].engine, item, "html", name, protection=settings.protection) for name, item in items
        ]
        check_lines([sentence for document in prepared for sentence in document.sentences], *limits)
        return prepared

    prepared = await off_loop(plan)
    sentences = [sentence for document in prepared for sentence in document.sentences]
    settings = dataclasses.replace(settings, alignment=_attends(route))
    results = await decode_route(service, request, route, sentences, settings)

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
    upload = check_file_fields(fields)
    protection = request_protection(fields)
    limit = service.serve.max_file_bytes
    if len(upload.data) > limit:
        raise ApiError(413, f"File too large: {len(upload.data)} bytes, the limit is {limit} (--max-file-bytes)")
    format, name = upload_format(upload.filename), download_name(upload.filename)
    source, target = fields["source"], fields["target"]
    if source != "auto":
        service.registry.route(source, target)  # an unknown pair is refused before the file is read

    def read(engine, language: str | None = None) -> PreparedDocument:
        limit_unpacked = UNPACKED_RATIO * limit
        return prepare(engine, upload.data, format, name, language, max_unpacked=limit_unpacked, protection=protection)

    first = service.registry.first.engine if source == "auto" else service.registry.route(source, target)[0].engine
    prepared = await off_loop(read, first)
    route, _ = await resolve(service, source, target, prepared.sentences)
    if route is not None and route[0].engine is not first:  # auto: cut again for the detected language's model
        prepared = await off_loop(read, route[0].engine)
    results = await _decode_file(service, request, route, prepared.sentences)
    data = await off_loop(prepared.rebuild, _pairs(results))
    key = service.files.put(name, data, MEDIA_TYPES[format])
    if key is None:
        store = service.files.max_bytes
        raise ApiError(
            413, f"Translated file too large: {len(data)} bytes, the file store holds {store} (--file-store-bytes)"
        )
    return key


async def _decode_file(service: Service, request: Request, route: tuple[Model, ...] | None, sentences: list[str]):
    """A file's sentences through `route` a request's worth (--max-lines) at a time, each patient for room in a
    full queue; a route of None (`auto` found no letter) keeps each sentence as it is."""
    if route is None:
        return [[_Kept(sentence)] for sentence in sentences]
    settings = Settings(alignment=_attends(route))
    results, size = [], service.serve.max_lines
    for start in range(0, len(sentences), size):
        lines = sentences[start : start + size]
        results += await decode_route(service, request, route, lines, settings, patient=start > 0)
    return results


@dataclasses.dataclass(frozen=True)
class _Kept:
    """A sentence kept as it is: its text, no alignment (the proportional guess places its tags)."""

    text: str
    alignment: None = None
