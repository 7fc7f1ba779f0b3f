"""The HTTP application (FastAPI): the routes, API keys, errors as `{"error": ...}`, and the metrics.

Routes: GET / (the page), GET /health, GET /metrics, GET and POST /languages, GET /frontend/settings, POST /translate
(LibreTranslate's, libretranslate.py), POST /api/translate (the native API, native.py), POST /api/attention (one
sentence's cross-attention, for the page). Every translation goes through the batcher (batcher.py): the route
waits for its own results while the worker decodes. With API keys, every POST except /languages needs a valid
`api_key` field: none is a 400 and a wrong one a 403, as LibreTranslate answers. No route reads or writes a file.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from contextlib import asynccontextmanager
from importlib import resources

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException

from transformer.config import ServeConfig
from transformer.errors import UserError
from transformer.serving.batcher import Batcher, Job
from transformer.serving.engine import Engine, Settings
from transformer.serving.libretranslate import NAMES, languages, plan_translate
from transformer.serving.metrics import Metrics
from transformer.serving.native import hypotheses, integer_field, plan_native
from transformer.serving.requests import ApiError, check_lines, request_fields

PAGE = resources.files("transformer.serving").joinpath("page.html").read_text(encoding="utf-8")


def _settle(future: asyncio.Future, value: object) -> None:
    if not future.done():
        future.set_exception(value) if isinstance(value, BaseException) else future.set_result(value)


class Service:
    """What the routes share: the engine, the batcher, the limits, the keys and the metrics."""

    def __init__(self, engine: Engine, serve: ServeConfig, keys: frozenset[str] | None) -> None:
        self.engine, self.serve, self.keys, self.metrics = engine, serve, keys, Metrics()
        self.batcher = Batcher(
            engine.decode, wait_s=serve.batch_wait_ms / 1000, max_tokens=serve.batch_tokens, capacity=serve.queue_lines
        )
        self.limits = dict(max_lines=serve.max_lines, max_chars=serve.max_chars, max_beam=serve.max_beam)

    async def fields(self, request: Request) -> dict:
        """The request's fields (requests.py), after the API key check."""
        fields = await request_fields(request.headers, request.url.query, request.stream(), self.serve.max_body_bytes)
        if self.keys is not None:
            key = fields.get("api_key")
            if key in (None, ""):
                raise ApiError(400, "Please contact the server operator to get an API key")
            if not isinstance(key, str) or not any(hmac.compare_digest(key.encode(), k.encode()) for k in self.keys):
                raise ApiError(403, "Invalid API key")
        return fields

    async def decode(self, lines: list[str], settings: Settings, controls: dict[str, list] | None = None) -> list:
        """Each line's hypotheses, decoded by the batcher with others' lines; 503 when its queue is full."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        tokens = self.engine.count_tokens(lines)
        job = Job(
            lines, settings, tokens, lambda value: loop.call_soon_threadsafe(_settle, future, value), controls or {}
        )
        if not self.batcher.submit(job):
            raise ApiError(
                503,
                f"Server busy: {self.batcher.queued_lines} lines are waiting; retry later",
                {"Retry-After": str(self.serve.retry_after_s)},
            )
        try:
            results = await future
        except UserError as exc:
            raise ApiError(400, f"Invalid request: {exc}") from None
        except Exception as exc:
            raise ApiError(500, f"Cannot translate text: {exc}") from None
        self.metrics.work(len(lines), tokens, sum(len(hyps[0].tokens) for hyps in results if hyps))
        return results


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
        "supportedFilesFormat": [],
        "alignments": service.engine.attends,
        "language": {
            "source": {"code": source, "name": NAMES.get(source, source)},
            "target": {"code": target, "name": NAMES.get(target, target)},
        },
    }


@router.post("/translate")
async def translate(request: Request) -> dict:
    service = _service(request)
    fields = await service.fields(request)
    plan = plan_translate(
        fields, service.engine.languages, beam_size=service.engine.defaults.beam_size, **service.limits
    )
    return plan.answer(await service.decode(plan.lines, plan.settings))


@router.post("/api/translate")
async def translate_native(request: Request) -> dict:
    service, serve = _service(request), _service(request).serve
    fields = await service.fields(request)
    lines, settings, controls = plan_native(
        fields,
        service.engine.defaults,
        max_len_a=serve.max_len_a,
        max_len_b=serve.max_len_b,
        **service.limits,
    )
    return hypotheses(await service.decode(lines, settings, controls), settings.alignment)


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
    best = (await service.decode([text], Settings()))[0][0]
    try:
        drawn = await asyncio.to_thread(service.engine.attention, text, best.tokens, layer)
    except UserError as exc:
        raise ApiError(400, f"Invalid request: {exc}") from None
    return {"source": text, "translation": best.text, **drawn}


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)


def create_app(engine: Engine, serve: ServeConfig, keys: frozenset[str] | None = None) -> FastAPI:
    """The application; its batcher's worker starts with the server and drains when it stops."""
    service = Service(engine, serve, keys)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.batcher.start()
        yield
        await asyncio.to_thread(service.batcher.close)  # after the server answered every accepted request

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    app.include_router(router)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(HTTPException, _http_error)

    @app.middleware("http")
    async def timed(request: Request, call_next):
        start = time.perf_counter()
        try:
            response = await call_next(request)
        except Exception:
            service.metrics.request(500, time.perf_counter() - start)
            raise
        service.metrics.request(response.status_code, time.perf_counter() - start)
        return response

    return app
