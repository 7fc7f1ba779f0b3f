"""Request bodies as LibreTranslate reads them: JSON, form-urlencoded or multipart, read up to a size limit.

Every problem is an `ApiError` (an HTTP status and one line), answered as LibreTranslate answers errors:
`{"error": "..."}`. A body larger than the limit is refused from its Content-Length before it is read, or as soon
as the bytes read pass the limit (a chunked body), with 413. Non-UTF-8 text, malformed JSON (nesting too deep
included), a form that does not parse and a multipart body with a file part are 400s; only a file upload
(`parse_upload`, POST /translate_file) has one file part, read as an `Upload`. Form and multipart fields
keep the first value of a repeated name, and the query string's fields count too (Flask's `request.values`, which
LibreTranslate reads); a JSON body's fields are its top-level object's keys and nothing else. The body is read on
the event loop (`read_body`) and parsed off it (`parse_fields`, in a worker thread).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl

JSON_TYPES = ("application/json",)
FORM_TYPE = "application/x-www-form-urlencoded"
MULTIPART_TYPE = "multipart/form-data"
MAX_FIELDS = 64  # form and multipart fields per request
MANY_FILES = "Invalid request: one file at a time"


class ApiError(Exception):
    """An answer other than 200: `status`, a one-line `message` (the `error` field) and extra headers."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, dict(headers or {})


def media_type(headers: Mapping[str, str]) -> str:
    """The Content-Type without its parameters, lower case ('' when absent)."""
    return headers.get("content-type", "").split(";")[0].strip().lower()


async def read_body(
    headers: Mapping[str, str], stream: AsyncIterator[bytes], limit: int, flag: str = "--max-body-bytes"
) -> bytes:
    """The whole body, refused with 413 naming `flag` (before reading, when Content-Length says so) past `limit`
    bytes."""
    declared = headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise ApiError(400, f"Invalid request: Content-Length {declared!r} is not a number of bytes")
        if int(declared) > limit:
            raise ApiError(413, f"Request body too large: {int(declared)} bytes, the limit is {limit} ({flag})")
    chunks, size = [], 0
    async for chunk in stream:
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"Request body too large: over {limit} bytes ({flag})")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(body: bytes) -> dict:
    """A JSON object's fields; anything else (not JSON, not UTF-8, not an object, nested too deep) is a 400."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ApiError(400, "Invalid JSON format") from None
    if not isinstance(value, dict):
        raise ApiError(400, "Invalid JSON format")
    try:  # "\ud800" parses, but a lone surrogate is no text: refused here, not found by the tokenizer
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, "Invalid JSON format: a string holds a lone surrogate (\\ud800-\\udfff)") from None
    return value


def parse_form(text: bytes | str) -> dict[str, str]:
    """form-urlencoded fields (the first of a repeated name), decoded as UTF-8 strictly."""
    try:
        text = text.decode("utf-8") if isinstance(text, bytes) else text
        pairs = parse_qsl(text, keep_blank_values=True, errors="strict", max_num_fields=MAX_FIELDS)
    except ValueError:  # not UTF-8 (raw or %-escaped), or too many fields
        raise ApiError(400, "Invalid request: the form is not UTF-8 text or has too many fields") from None
    fields: dict[str, str] = {}
    for name, value in pairs:
        fields.setdefault(name, value)
    return fields


@dataclass(frozen=True)
class Upload:
    """A multipart file part: the name the client gave it and its bytes."""

    filename: str
    data: bytes


async def parse_multipart(headers: Mapping[str, str], body: bytes, files: int = 0) -> dict[str, str | Upload]:
    """multipart/form-data fields (the first of a repeated name); at most `files` file parts (`Upload`s), a file
    part past them refused."""
    from starlette.datastructures import Headers
    from starlette.formparsers import MultiPartParser

    async def stream() -> AsyncIterator[bytes]:
        yield body

    parser = MultiPartParser(
        Headers(headers=dict(headers)), stream(), max_files=files, max_fields=MAX_FIELDS, max_part_size=len(body) + 1
    )
    parser.spool_max_size = len(body) + 1  # a file part stays in memory, as the body it comes from already is
    try:
        form = await parser.parse()
    except Exception as exc:  # the parser's own errors and malformed headers alike: the client's body is at fault
        if "Too many files" in str(exc):
            raise ApiError(400, "Invalid request: file parts are not accepted" if not files else MANY_FILES) from None
        raise ApiError(400, f"Invalid request: malformed multipart body ({str(exc) or type(exc).__name__})") from None
    fields: dict[str, str | Upload] = {}
    for name, value in form.multi_items():
        if not isinstance(value, str):
            value = Upload(value.filename or "", await value.read())
        fields.setdefault(name, value)
    await form.close()
    return fields


def parse_fields(headers: Mapping[str, str], query: str, body: bytes) -> dict:
    """The request's fields from its body (JSON, form or multipart), with the query string's under a form's.

    CPU work on up to a whole body: called off the event loop (asyncio.to_thread). Starlette's multipart parser is a
    coroutine, so it runs to completion here on an event loop of this thread's own."""
    kind = media_type(headers)
    if kind in JSON_TYPES or kind.endswith("+json"):
        return parse_json(body)
    fields = parse_form(query)
    if kind == FORM_TYPE:
        return {**fields, **parse_form(body)}
    if kind == MULTIPART_TYPE:
        return {**fields, **asyncio.run(parse_multipart(headers, body))}
    if body.strip():
        raise ApiError(
            400,
            f"Invalid request: unsupported Content-Type {kind or '(none)'!r}; send JSON, "
            "application/x-www-form-urlencoded or multipart/form-data",
        )
    return fields


def parse_upload(headers: Mapping[str, str], query: str, body: bytes) -> dict[str, str | Upload]:
    """A file upload's fields (multipart/form-data, one file part), with the query string's under them; any other
    body is a 400. Called off the event loop, as `parse_fields` is."""
    if media_type(headers) != MULTIPART_TYPE:
        raise ApiError(400, "Invalid request: send the file as multipart/form-data (a `file` part)")
    return {**parse_form(query), **asyncio.run(parse_multipart(headers, body, files=1))}


def check_lines(lines: list[str], max_lines: int, max_chars: int) -> None:
    """A request's lines within the server's limits (lines per request, characters per line), else a 400."""
    if len(lines) > max_lines:
        raise ApiError(
            400,
            f"Invalid request: request ({len(lines)} lines) exceeds text limit ({max_lines} lines "
            "per request, --max-lines)",
        )
    for number, line in enumerate(lines, start=1):
        if len(line) > max_chars:
            raise ApiError(
                400,
                f"Invalid request: line {number} ({len(line)} characters) exceeds text limit "
                f"({max_chars} characters per line, --max-chars)",
            )


def short(value: object, width: int = 40) -> str:
    """repr(value), cut to `width` characters for an error message."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
