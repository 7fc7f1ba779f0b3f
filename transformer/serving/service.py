"""What the routes share (app.py): the models (registry.py) and a batcher for each, the limits, the keys and the
rate limits (access.py), the language detector, the metrics and the translated files (file_store.py), and how one
request's body, work and answer are bounded.

- The event loop moves bytes and little else: parsing a body, planning a request, tokenizing (the limits and
  weights of work.py), decoding and building an answer run in threads (`off_loop`, or the batcher's worker), so a
  large request never stalls the other connections.
- A request's deadline, `--request-timeout-s` from its arrival (`--file-timeout-s` for a file upload): a body that
  has not arrived by then is a 408; an answer not decoded by then is a 504, and the batcher drops the rest of its
  lines at its next turn. A file's sentences go to the batcher a request's worth at a time and wait for room in a
  full queue (`patient`), so a file shares the decoder in turns as any request does.
- Each model has its own batcher and worker thread: requests for different pairs are decoded at the same time,
  and one pair's load never waits behind another's; each model's work is bounded as one model's is (its queue,
  `--queue-lines`, and its rounds, `--batch-tokens`).
- Access (`admit`, once a request's fields are read): with keys, no `api_key` is a 400 and an unknown one a 403;
  `--req-limit` (or a key's own) past it, 429 (access.py).
- A model error answers 500 with the request's id and a generic message; the detail goes to the server log with the
  same id (batcher.py logs it), never to the client.
- Shutdown (`drain`, on SIGTERM): no new request is admitted (503), the requests in flight are decoded (a
  pivot's second leg and a file's next sentences included), and those still unanswered `--shutdown-timeout-s`
  later are answered 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request

from transformer.config import ServeConfig
from transformer.errors import UserError
from transformer.serving.access import KeyRing, RateLimiter
from transformer.serving.batcher import Batcher, ExpiredError, Job
from transformer.serving.detection import LanguageDetector
from transformer.serving.engine import Settings
from transformer.serving.file_store import FileStore
from transformer.serving.metrics import Metrics
from transformer.serving.registry import Pair, Registry
from transformer.serving.requests import ApiError, parse_fields, parse_upload, read_body
from transformer.serving.work import WorkLimits, measure

UPLOAD_FIELDS_BYTES = 64 << 10  # room in an upload's body for its other fields and the parts' headers, bytes
ROOM_WAIT_S = 0.05  # how often a patient request (a file's next sentences) tries a full queue again


async def off_loop(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`function(*args, **kwargs)` in a worker thread: CPU work kept off the event loop."""
    return await asyncio.to_thread(function, *args, **kwargs)


def _settle(future: asyncio.Future, value: object) -> None:
    if not future.done():
        future.set_exception(value) if isinstance(value, BaseException) else future.set_result(value)


def _deliverer(future: asyncio.Future) -> Callable[[object], None]:
    """How the batcher's worker hands `future` its value: through the future's event loop."""
    loop = future.get_loop()

    def deliver(value: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the request was answered (cut) before
            loop.call_soon_threadsafe(_settle, future, value)

    return deliver


def internal_error(request_id: str) -> ApiError:
    """The 500 a client sees: the request's id and where the detail is, nothing of the exception itself."""
    return ApiError(500, f"Cannot translate text: internal error (request id {request_id}; the server log has it)")


class Service:
    """The routes' shared state and the bounded steps of a request: its fields, its decoding, the shutdown."""

    def __init__(self, registry: Registry, serve: ServeConfig, keys: KeyRing | None = None) -> None:
        self.registry, self.serve, self.keys, self.metrics = registry, serve, keys, Metrics()
        self.batchers = {
            pair: Batcher(
                model.engine.decode,
                wait_s=serve.batch_wait_ms / 1000,
                max_tokens=serve.batch_tokens,
                capacity=serve.queue_lines,
            )
            for pair, model in registry.models.items()
        }
        self.limits = dict(max_lines=serve.max_lines, max_chars=serve.max_chars, max_beam=serve.max_beam)
        self.work_limits = WorkLimits.of(serve)
        self.files = FileStore(max_bytes=serve.file_store_bytes, ttl_s=serve.file_ttl_s)
        self.rates = RateLimiter()
        self._detector: LanguageDetector | None = None
        self._stopping = asyncio.Event()  # set when the shutdown's bound passes: whatever still waits is cut
        self._closing = False  # the shutdown began: no new request is admitted

    @property
    def detector(self) -> LanguageDetector:
        """The language detector over the served source languages (loaded on first use, or by `server.serve`)."""
        return self.load_detector()

    def load_detector(self) -> LanguageDetector:
        if self._detector is None:
            self._detector = LanguageDetector(self.registry.sources)
        return self._detector

    @property
    def queued_lines(self) -> int:
        return sum(batcher.queued_lines for batcher in self.batchers.values())

    def start(self) -> None:
        for batcher in self.batchers.values():
            batcher.start()

    def close(self, timeout: float) -> None:
        """Every batcher stops admitting, decodes what it admitted and stops, within `timeout` seconds in all."""
        end = time.monotonic() + timeout
        for batcher in self.batchers.values():
            batcher.close(0)
        for batcher in self.batchers.values():
            batcher.close(max(end - time.monotonic(), 0.0))

    def timeout(self, request: Request) -> tuple[float, str]:
        """(seconds, flag) from `request`'s arrival to its answer: --file-timeout-s for a file upload (a route
        that sets `request.state.timeout`), --request-timeout-s for any other."""
        return getattr(request.state, "timeout", None) or (self.serve.request_timeout_s, "--request-timeout-s")

    def deadline(self, request: Request) -> float:
        """time.monotonic() by which `request` is answered (its arrival + its timeout)."""
        return request.state.arrived + self.timeout(request)[0]

    def timed_out(self, request: Request, *, body: bool = False) -> ApiError:
        """What a client sees past its deadline: 408 while its body was still coming, else 504."""
        limit, flag = self.timeout(request)
        if body:
            return ApiError(408, f"Request timeout: the body did not arrive within {limit:g} s ({flag})")
        return ApiError(504, f"Request timeout: not translated within {limit:g} s ({flag}); send less at once")

    async def fields(self, request: Request) -> dict:
        """The request's fields (requests.py), once it is admitted (`admit`); a body not read by the deadline is a
        408."""
        body = await self.body(request, self.serve.max_body_bytes, "--max-body-bytes")
        fields = await off_loop(parse_fields, request.headers, request.url.query, body)
        self.admit(request, fields)
        return fields

    async def upload(self, request: Request) -> dict:
        """A file upload's fields (a multipart body; the file an `Upload`), once admitted: its body up to
        --max-file-bytes and room for the form's other fields, read by the deadline (408)."""
        limit = self.serve.max_file_bytes + UPLOAD_FIELDS_BYTES
        body = await self.body(request, limit, f"--max-file-bytes + {UPLOAD_FIELDS_BYTES} for the other fields")
        fields = await off_loop(parse_upload, request.headers, request.url.query, body)
        self.admit(request, fields)
        return fields

    async def body(self, request: Request, limit: int, flag: str) -> bytes:
        """The request's body, up to `limit` bytes (413 naming `flag`), read by its deadline (408)."""
        reading = read_body(request.headers, request.stream(), limit, flag)
        try:
            return await self._within(reading, self.deadline(request))
        except TimeoutError:
            raise self.timed_out(request, body=True) from None

    def admit(self, request: Request, fields: dict) -> None:
        """With --api-keys: no `api_key` field is a 400, one not in the file a 403 (LibreTranslate's answers). With
        --req-limit or a key's own limit: a 429 past it (access.py). Each request's char limit is left in
        `request.state.char_limit` (a key's own, or --char-limit; -1: none)."""
        key = fields.get("api_key")
        limits = None
        if self.keys is not None:
            if key in (None, ""):
                raise ApiError(400, "Please contact the server operator to get an API key")
            limits = self.keys.lookup(key)
            if limits is None:
                raise ApiError(403, "Invalid API key")
        request.state.char_limit = limits.char_limit if limits and limits.char_limit else self.serve.char_limit
        req_limit = limits.req_limit if limits and limits.req_limit else self.serve.req_limit
        if req_limit > 0:
            client = f"key {key}" if limits is not None else f"address {request.client.host if request.client else ''}"
            q = fields.get("q")
            self.rates.admit(client, req_limit, max(len(q), 1) if isinstance(q, list) else 1)

    async def decode(
        self,
        request: Request,
        lines: list[str],
        settings: Settings,
        controls: dict[str, list] | None = None,
        *,
        pair: Pair | None = None,
        patient: bool = False,
    ) -> list:
        """Each line's hypotheses from the model of `pair` (None: the one model), decoded by its batcher with others'
        lines, within the work limits (400), the queue (503; `patient`: wait for room instead, up to the deadline)
        and the request's deadline (504)."""
        if not lines:
            return []
        controls = controls or {}
        model = self.registry.models[pair] if pair is not None else self.registry.first
        batcher = self.batchers[model.pair]
        sources, weights = await off_loop(measure, model.engine, lines, settings, controls, self.work_limits)
        if self._closing and not getattr(request.state, "admitted", False):  # a new request, not a pivot's next leg
            raise ApiError(503, "Server shutting down: retry on another server", self._retry_after())
        future = asyncio.get_running_loop().create_future()
        job = Job(
            lines,
            settings,
            weights,
            _deliverer(future),
            controls,
            deadline=self.deadline(request),
            name=request.state.id,
        )
        await self._submit(batcher, job, request, patient)
        request.state.admitted = True  # its next legs and a file's next sentences go on through a shutdown
        results = await self._results(job, future, request)
        self.metrics.work(len(lines), sum(sources), sum(len(hyps[0].tokens) for hyps in results if hyps))
        return results

    async def _submit(self, batcher: Batcher, job: Job, request: Request, patient: bool) -> None:
        """`job` into `batcher`'s queue; when it is full, a 503 (`patient`: the next try ROOM_WAIT_S later, up to
        the deadline, 504, or the shutdown, 503)."""
        while not batcher.submit(job):
            if not patient:
                busy = f"Server busy: {batcher.queued_lines} lines are waiting; retry later"
                raise ApiError(503, busy, self._retry_after())
            if self._stopping.is_set() or (self._closing and not getattr(request.state, "admitted", False)):
                raise ApiError(503, "Server shutting down: retry on another server", self._retry_after())
            if time.monotonic() >= job.deadline:
                raise self.timed_out(request)
            await asyncio.sleep(ROOM_WAIT_S)

    async def _results(self, job: Job, future: asyncio.Future, request: Request) -> list:
        """The job's results, or the ApiError its end calls for; the batcher drops a job answered otherwise."""
        request_id = request.state.id
        try:
            return await self._within(future, job.deadline)
        except (TimeoutError, ExpiredError):
            raise self.timed_out(request) from None
        except UserError as exc:
            raise ApiError(400, f"Invalid request: {exc}") from None
        except ApiError:
            raise
        except Exception:  # the batcher logged it, with this request's id
            raise internal_error(request_id) from None
        finally:
            job.cancel()

    async def _within(self, awaitable: Awaitable, deadline: float):
        """`awaitable`'s result; TimeoutError past `deadline` (time.monotonic()), or a 503 once the shutdown's bound
        passed; either way `awaitable` is cancelled."""
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            left = max(deadline - time.monotonic(), 0.0)
            done, _ = await asyncio.wait({task, stop}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():  # past the deadline, the shutdown's bound, or this request itself cancelled
                task.cancel()
        if task in done:
            return task.result()
        if self._stopping.is_set():
            raise ApiError(503, "Server shutting down: not answered in time; retry", self._retry_after())
        raise TimeoutError

    def _retry_after(self) -> dict[str, str]:
        return {"Retry-After": str(self.serve.retry_after_s)}

    def drain(self) -> None:
        """Shutdown begins (from the event loop): admit nothing more; what still waits --shutdown-timeout-s later
        (a body, a translation) is answered 503."""
        self._closing = True
        asyncio.get_running_loop().call_later(self.serve.shutdown_timeout_s, self._stopping.set)
