"""The HTTP application (FastAPI): the routes, errors as `{"error": ...}`, request ids, and the metrics.

Routes: GET / (the page), GET /health, GET /metrics, GET and POST /languages, GET /frontend/settings, POST /translate
(LibreTranslate's, libretranslate.py; `format: html` through documents.py), POST /detect (LibreTranslate's,
detection.py), POST /translate_file and GET /download_file/KEY (LibreTranslate's file translation: documents.py,
file_store.py), POST /api/translate (the native API, native.py), POST /api/attention (one sentence's
cross-attention, for the page). Each request's route (one model, or two through the pivot; its source detected
for `auto`) is decided first (registry.py, routing.py); every translation goes through its models' batchers
(batcher.py): the route waits for its own results while the workers decode. The steps of a request, each bounded,
are service.py's: its fields and its admission (API keys: with keys, every POST except /languages needs a valid
`api_key` field: none is a 400 and a wrong one a 403, as LibreTranslate answers; rate limits, 429), its work, its
decoding;
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
from transformer.decoding.streaming import Translation
from transformer.errors import UserError
from transformer.serving.access import KeyRing
from transformer.serving.documents import file_formats, translate_file, translate_html
from transformer.serving.engine import Settings
from transformer.serving.glossaries import with_glossary
from transformer.serving.libretranslate import check_request_limits, check_translate, plan_translate
from transformer.serving.native import hypotheses, integer_field, plan_native
from transformer.serving.registry import Model, Registry, name
from transformer.serving.requests import ApiError, check_lines, short
from transformer.serving.routing import decode_route, request_route, resolve
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
    return {"status": "ok", "queue_lines": _service(request).queued_lines}


@router.get("/metrics")
async def metrics(request: Request) -> dict:
    service = _service(request)
    queues = {pair: batcher.queued_lines for pair, batcher in service.batchers.items()}
    return service.metrics.snapshot(queues, service.serve.queue_lines, list(service.registry.models.values()))


@router.api_route("/languages", methods=["GET", "POST"])
async def language_list(request: Request) -> list:
    return _service(request).registry.languages()


@router.get("/frontend/settings")
async def frontend_settings(request: Request) -> dict:
    service = _service(request)
    source, target = service.registry.first.pair
    return {
        "charLimit": service.serve.char_limit if service.serve.char_limit > 0 else service.serve.max_chars,
        "apiKeys": service.keys is not None,
        "keyRequired": service.keys is not None,
        "suggestions": False,
        "filesTranslation": bool(file_formats()),
        "supportedFilesFormat": list(file_formats()),
        "alignments": all(model.engine.attends for model in service.registry.models.values()),
        "language": {
            "source": {"code": source, "name": name(source)},
            "target": {"code": target, "name": name(target)},
        },
    }


def _limits(service: Service, request: Request) -> dict:
    return dict(batch_limit=service.serve.batch_limit, char_limit=request.state.char_limit)


@router.post("/translate")
async def translate(request: Request) -> JSONResponse:
    service = _service(request)
    fields = await service.fields(request)
    items, text_format = check_translate(fields, **_limits(service, request))
    route, detected = await resolve(service, fields["source"], fields["target"], items)
    beam_size = route[-1].engine.defaults.beam_size if route else 1
    plan = await off_loop(plan_translate, fields, items, text_format, detected, beam_size=beam_size, **service.limits)
    if route is None:  # `auto` and no letter in q: answered as it is, as LibreTranslate answers it
        return JSONResponse(plan.answer([[item] for item in items]))
    if plan.html is not None:
        if fields.get("glossary") is not None:
            raise ApiError(400, "Invalid request: a glossary applies to format text (html is placed by alignment)")
        texts = await translate_html(service, request, route, plan.html, plan.settings)
        return await off_loop(lambda: JSONResponse(plan.answer(texts)))
    glossaries = request.app.state.glossaries
    settings, controls = await off_loop(
        with_glossary, fields, plan.lines, plan.settings, {}, glossaries, per_request=False
    )
    results = await decode_route(service, request, route, plan.lines, settings, controls)
    return await off_loop(lambda: JSONResponse(plan.answer(plan.texts(results))))


@router.post("/detect")
async def detect(request: Request) -> list:
    """LibreTranslate's language detection: `q` (a string, or a list of strings read together) -> [{"confidence",
    "language"}, ...] over the languages this server translates from, best first (detection.py)."""
    service = _service(request)
    fields = await service.fields(request)
    q = fields.get("q")
    if q in (None, "", []):
        raise ApiError(400, "Invalid request: missing q parameter")
    texts = [q] if isinstance(q, str) else q
    if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
        raise ApiError(400, f"Invalid request: q must be a string or a list of strings, got {short(q)}")
    check_request_limits(q, **_limits(service, request))
    ranked = await off_loop(lambda: service.detector.detect(" ".join(texts)))
    if not ranked:
        if not service.detector.known:
            known = ", ".join(service.registry.sources)
            raise ApiError(400, f"Invalid request: the language identifier knows none of {known}")
        raise ApiError(400, "Invalid request: q holds no letter to tell a language from (digits, punctuation)")
    return [{"confidence": round(confidence, 1), "language": code} for code, confidence in ranked]


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
    q = fields.get("q")
    if isinstance(q, (str, list)) and q:
        check_request_limits(q, **_limits(service, request))
    route, detected = await request_route(service, fields, [q] if isinstance(q, str) else q)
    defaults = route[-1].engine.defaults if route else service.registry.first.engine.defaults
    lengths = dict(max_len_a=serve.max_len_a, max_len_b=serve.max_len_b)
    lines, settings, controls = await off_loop(plan_native, fields, defaults, **lengths, **service.limits)
    settings, controls = await off_loop(with_glossary, fields, lines, settings, controls, request.app.state.glossaries)
    if route is None:  # `auto` and no letter: each line as it is
        results = [[_as_is(line)] for line in lines]
    else:
        results = await decode_route(service, request, route, lines, settings, controls)
    threshold = route[-1].engine.threshold if route and len(route) == 1 else None
    answer = hypotheses(results, settings.alignment, threshold)
    answer["route"] = [route[0].pair[0], *(model.pair[1] for model in route)] if route else []
    if detected is not None:
        answer["detectedLanguage"] = detected
    return await off_loop(lambda: JSONResponse(answer))


def _as_is(line: str) -> Translation:
    """A line with no letter under `source: auto`: itself, confidence 0 (as LibreTranslate answers it)."""
    return Translation(line, 0.0, 0.0, [], confidence=0.0)


@router.post("/api/attention")
async def attention(request: Request) -> dict:
    """{"q": one sentence, "layer": a decoder layer (default: the last), "source", "target" (a several-pair
    server's)} -> its translation and the decoder's attention over the source at that layer (mean over heads),
    pieces on both axes."""
    service = _service(request)
    fields = await service.fields(request)
    text, layer = fields.get("q"), fields.get("layer")
    if not isinstance(text, str) or not text.strip() or "\n" in text:
        raise ApiError(400, "Invalid request: q must be one non-empty line of text")
    check_lines([text], 1, service.serve.max_chars)
    if layer is not None:
        integer_field(layer, "layer", -64, 63)
    route, _ = await request_route(service, fields, [text])
    if route is None or len(route) > 1:
        raise ApiError(400, "Invalid request: attention is drawn for one model; this pair has none of its own")
    model: Model = route[0]
    best = (await service.decode(request, [text], Settings(), pair=model.pair))[0][0]
    try:
        drawn = await off_loop(model.engine.attention, text, best.tokens, layer)
    except UserError as exc:
        raise ApiError(400, f"Invalid request: {exc}") from None
    return {"source": text, "translation": best.text, **drawn}


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)


def create_app(
    models: Registry | object,
    serve: ServeConfig,
    keys: KeyRing | frozenset[str] | None = None,
    glossaries: dict | None = None,
) -> FastAPI:
    """The application; its batchers' workers start with the server and drain when it stops. models: a `Registry`
    (or one engine: a one-pair server); keys: a KeyRing (or a set of keys without limits of their own);
    glossaries: {name: Glossary} that requests may name (glossaries.py)."""
    registry = models if isinstance(models, Registry) else Registry([Model(models)], pivot=serve.pivot)
    keys = keys if keys is None or isinstance(keys, KeyRing) else KeyRing(keys)
    service = Service(registry, serve, keys)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.start()
        yield
        await off_loop(service.close, WORKER_CLOSE_S)  # every request answered (or cut by the shutdown's bound)

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
