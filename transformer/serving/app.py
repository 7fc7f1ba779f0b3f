"""The HTTP application (FastAPI): the routes, errors as `{"error": ...}`, request ids, and the metrics.

Routes: GET / (the page), GET /health, GET /metrics, GET and POST /languages, GET /frontend/settings, POST /translate
(LibreTranslate's, libretranslate.py; `format: html` through documents.py), POST /translate_file and GET
/download_file/KEY (LibreTranslate's file translation: documents.py, file_store.py), POST /api/translate (the
native API, native.py), POST /api/attention (one sentence's cross-attention, for the page). Every translation
goes through the batcher (batcher.py): the route waits for its own results while the worker decodes. The steps of
a request, each bounded, are service.py's: its fields (API keys: with keys, every POST except /languages needs a
valid `api_key` field: none is a 400 and a wrong one a 403, as LibreTranslate answers), its work, its decoding;
planning a request and building its answer run off the event loop too. Every answer carries `X-Request-ID`; an
unexpected error is a 500 naming it, its detail in the server log. No route reads or writes a file of the
machine: uploads and translated files live in memory. The glossaries a request may name were loaded at start
(glossaries.py); the terms its lines hold join their constraints before its work is bounded.
"""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import asynccontextmanager
from importlib import resources
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from transformer.config import ServeConfig
from transformer.errors import UserError
from transformer.serving.documents import file_formats, translate_file, translate_html
from transformer.serving.engine import Engine, Settings
from transformer.serving.glossaries import with_glossary
from transformer.serving.libretranslate import NAMES, languages, plan_translate
from transformer.serving.native import hypotheses, integer_field, plan_native
from transformer.serving.requests import ApiError, check_lines
from transformer.serving.service import Service, internal_error, off_loop

log = logging.getLogger(__name__)
PAGE = resources.files("transformer.serving").joinpath("page.html").read_text(encoding="utf-8")
WORKER_CLOSE_S = 5.0  # at shutdown, once every request is answered: how long the worker may finish its turn


router = APIRouter()


def _service(request: Request) -> Service:
    return request.app.state.service


@router.get("/", response_class=HTMLResponse)
async def page() -> str:
    return PAGE


@router.get("/health")
async def health(request: Request) -> dict:
    return {"status": "ok", "queue_lines": _service(request).batcher.queued_lines}


@router.get("/metrics")
async def metrics(request: Request) -> dict:
    service = _service(request)
    return service.metrics.snapshot(service.batcher.queued_lines, service.serve.queue_lines)


@router.api_route("/languages", methods=["GET", "POST"])
async def language_list(request: Request) -> list:
    return languages(*_service(request).engine.languages)


@router.get("/frontend/settings")
async def frontend_settings(request: Request) -> dict:
    service = _service(request)
    source, target = service.engine.languages
    return {
        "charLimit": service.serve.max_chars,
        "apiKeys": service.keys is not None,
        "keyRequired": service.keys is not None,
        "suggestions": False,
        "filesTranslation": bool(file_formats()),
        "supportedFilesFormat": list(file_formats()),
        "alignments": service.engine.attends,
        "language": {
            "source": {"code": source, "name": NAMES.get(source, source)},
            "target": {"code": target, "name": NAMES.get(target, target)},
        },
    }


@router.post("/translate")
async def translate(request: Request) -> JSONResponse:
    service = _service(request)
    fields = await service.fields(request)
    beam_size = service.engine.defaults.beam_size
    plan = await off_loop(plan_translate, fields, service.engine.languages, beam_size=beam_size, **service.limits)
    if plan.html is not None:
        if fields.get("glossary") is not None:
            raise ApiError(400, "Invalid request: a glossary applies to format text (html is placed by alignment)")
        texts = await translate_html(service, request, plan.html, plan.settings)
        return await off_loop(lambda: JSONResponse(plan.answer(texts)))
    glossaries = request.app.state.glossaries
    settings, controls = await off_loop(
        with_glossary, fields, plan.lines, plan.settings, {}, glossaries, per_request=False
    )
    results = await service.decode(request, plan.lines, settings, controls)
    return await off_loop(lambda: JSONResponse(plan.answer(plan.texts(results))))


@router.post("/translate_file")
async def translate_file_route(request: Request) -> dict:
    """LibreTranslate's file upload (multipart: `file`, `source`, `target`, `api_key`): the file translated
    (documents.py), answered with the URL it is downloaded from."""
    service = _service(request)
    request.state.timeout = (service.serve.file_timeout_s, "--file-timeout-s")
    key = await translate_file(service, request)
    return {"translatedFileUrl": f"{str(request.base_url).rstrip('/')}/download_file/{quote(key)}"}


@router.get("/download_file/{key}")
async def download_file(request: Request, key: str) -> Response:
    """A translated file by its key, as an attachment with its own name; 404 when unknown or expired."""
    service = _service(request)
    stored = service.files.get(key)
    if stored is None:
        ttl = service.serve.file_ttl_s
        raise ApiError(404, f"File not found: no such file, or it has expired (files are kept {ttl:g} s, --file-ttl-s)")
    disposition = f'attachment; filename="{stored.name}"'
    return Response(stored.data, media_type=stored.media_type, headers={"Content-Disposition": disposition})


@router.post("/api/translate")
async def translate_native(request: Request) -> JSONResponse:
    service, serve = _service(request), _service(request).serve
    fields = await service.fields(request)
    lengths = dict(max_len_a=serve.max_len_a, max_len_b=serve.max_len_b)
    lines, settings, controls = await off_loop(
        plan_native, fields, service.engine.defaults, **lengths, **service.limits
    )
    settings, controls = await off_loop(with_glossary, fields, lines, settings, controls, request.app.state.glossaries)
    results = await service.decode(request, lines, settings, controls)
    answer = lambda: JSONResponse(hypotheses(results, settings.alignment, service.engine.threshold))
    return await off_loop(answer)


@router.post("/api/attention")
async def attention(request: Request) -> dict:
    """{"q": one sentence, "layer": a decoder layer (default: the last)} -> its translation and the decoder's
    attention over the source at that layer (mean over heads), pieces on both axes."""
    service = _service(request)
    fields = await service.fields(request)
    text, layer = fields.get("q"), fields.get("layer")
    if not isinstance(text, str) or not text.strip() or "\n" in text:
        raise ApiError(400, "Invalid request: q must be one non-empty line of text")
    check_lines([text], 1, service.serve.max_chars)
    if layer is not None:
        integer_field(layer, "layer", -64, 63)
    best = (await service.decode(request, [text], Settings()))[0][0]
    try:
        drawn = await off_loop(service.engine.attention, text, best.tokens, layer)
    except UserError as exc:
        raise ApiError(400, f"Invalid request: {exc}") from None
    return {"source": text, "translation": best.text, **drawn}


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)


def create_app(
    engine: Engine, serve: ServeConfig, keys: frozenset[str] | None = None, glossaries: dict | None = None
) -> FastAPI:
    """The application; its batcher's worker starts with the server and drains when it stops. glossaries: {name:
    Glossary} that requests may name (glossaries.py)."""
    service = Service(engine, serve, keys)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.batcher.start()
        yield
        await off_loop(service.batcher.close, WORKER_CLOSE_S)  # every request answered (or cut by the shutdown's bound)

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    app.state.glossaries = glossaries or {}
    app.include_router(router)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(HTTPException, _http_error)

    @app.middleware("http")
    async def identified(request: Request, call_next):
        """Each request's id and arrival; its status and latency counted; an unexpected error a 500 with the id."""
        request.state.id, request.state.arrived = uuid.uuid4().hex[:12], time.monotonic()
        try:
            response = await call_next(request)
        except Exception as exc:  # a route's bug: the detail to the log, the id to the client
            log.error("request %s (%s %s) failed", request.state.id, request.method, request.url.path, exc_info=exc)
            response = await _api_error(request, internal_error(request.state.id))
        response.headers["X-Request-ID"] = request.state.id
        service.metrics.request(response.status_code, time.monotonic() - request.state.arrived)
        return response

    return app
