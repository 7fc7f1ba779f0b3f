"""LibreTranslate's API: POST /translate and /languages (and /translate_file's fields), with its request fields,
answers and error messages.

POST /translate reads `q` (a string, or a list of strings), `source`, `target`, `format` (`text` or `html`),
`alternatives` and `api_key` from a JSON body, a form or a multipart body (requests.py), and answers
`{"translatedText": ...}`: a string for a string `q`, a list for a list. With `source: auto` the answer adds
`detectedLanguage` (`{"confidence", "language"}`, the language detected among those served: routing.py; for a list
`q`, one such entry per item, all alike, as LibreTranslate answers). With `alternatives: N`
it adds `alternatives`, the next N hypotheses of the beam (a list per item for a list `q`). A `q` with several
lines is translated line by line and joined back with newlines; a `format: html` item is translated as an HTML
document, its markup kept and its inline tags placed by word alignment (documents.py). Placeholders, URLs, numbers,
code and the like are kept as written unless `protect` is false (protected.py).
LibreTranslate's `--batch-limit` (items of a list `q`) and `--char-limit` (characters of a request's `q`, a key's
own limit first) are checked here. The languages are the registry's (registry.py: which pairs, which routes).
Errors are LibreTranslate's: 400 with "Invalid request: missing q parameter", "xx is not supported",
"xml format is not supported", "Invalid request: request (N) exceeds text limit (M)", ..., each as
`{"error": "..."}`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from transformer.serving.engine import Settings
from transformer.serving.protected import request_protection
from transformer.serving.requests import ApiError, Upload, check_lines, short


@dataclass
class Plan:
    """What one /translate request decodes, and how its answer is built from each item's translations."""

    settings: Settings
    answer: Callable[[list[list[str]]], dict]  # from each item's translations: the best, then its alternatives
    lines: list[str] = field(default_factory=list)  # format text: the lines decoded
    texts: Callable[[list[list]], list[list[str]]] | None = None  # format text: each item's, from each line's results
    html: list[tuple[str, str]] | None = None  # format html: (name, item) of each, translated as a document


def check_translate(fields: dict, *, batch_limit: int = -1, char_limit: int = -1) -> tuple[list[str], str]:
    """(q's items, the format) once a /translate request's fields are as LibreTranslate requires them (q, source and
    target given, q a string or a list of strings, within --batch-limit and --char-limit: -1 none), else its 400."""
    for name in ("q", "source", "target"):
        if fields.get(name) in (None, "", []):
            raise ApiError(400, f"Invalid request: missing {name} parameter")
    q = fields["q"]
    items = [q] if isinstance(q, str) else q
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ApiError(400, f"Invalid request: q must be a string or a list of strings, got {short(q)}")
    for name in ("source", "target"):
        if not isinstance(fields[name], str):
            raise ApiError(400, f"{short(fields[name])} is not supported")
    text_format = fields.get("format") or "text"
    if text_format not in ("text", "html"):
        raise ApiError(400, f"{short(text_format)} format is not supported")
    check_request_limits(q, batch_limit=batch_limit, char_limit=char_limit)
    return items, text_format


def check_request_limits(q: str | list[str], *, batch_limit: int, char_limit: int) -> None:
    """LibreTranslate's --batch-limit (items of a list q) and --char-limit (characters of q in all); -1: none."""
    if isinstance(q, list) and batch_limit > 0 and len(q) > batch_limit:
        raise ApiError(400, f"Invalid request: request ({len(q)}) exceeds text limit ({batch_limit}) (--batch-limit)")
    chars = len(q) if isinstance(q, str) else sum(len(item) for item in q)
    if char_limit > 0 and chars > char_limit:
        raise ApiError(400, f"Invalid request: request ({chars}) exceeds text limit ({char_limit}) (--char-limit)")


def plan_translate(
    fields: dict,
    items: list[str],
    text_format: str,
    detected: dict | None,
    *,
    max_lines: int,
    max_chars: int,
    max_beam: int,
    beam_size: int,
) -> Plan:
    """Plan a checked /translate request's decoding (`check_translate`) and how its answer is built; `detected`:
    the detected source language's entry (`source: auto`), else None."""
    single = isinstance(fields["q"], str)
    alternatives = _alternatives(fields.get("alternatives"), max_beam - 1)
    nbest = 1 + alternatives
    decode = (("beam_size", nbest),) if nbest > beam_size else ()
    settings = Settings(decode=decode, nbest=nbest, protection=request_protection(fields))
    extra = {} if detected is None else {"detectedLanguage": detected if single else [detected] * len(items)}

    def answer(texts: list[list[str]]) -> dict:
        body = {"translatedText": texts[0][0] if single else [item[0] for item in texts], **extra}
        if alternatives:
            body["alternatives"] = texts[0][1:] if single else [item[1:] for item in texts]
        return body

    if text_format == "html":  # documents.py: the items' errors name them q, or q[0], q[1], ...
        return Plan(settings, answer, html=[("q" if single else f"q[{n}]", item) for n, item in enumerate(items)])
    per_item = [item.replace("\r\n", "\n").replace("\r", "\n").split("\n") for item in items]
    lines = [line for item_lines in per_item for line in item_lines]
    check_lines(lines, max_lines, max_chars)

    def texts(results: list[list]) -> list[list[str]]:
        """Each item's lines' k-th hypotheses joined back with newlines, for k < nbest."""
        out, start = [], 0
        for item_lines in per_item:
            hyps = results[start : start + len(item_lines)]
            start += len(item_lines)
            out.append(["\n".join(h[min(k, len(h) - 1)].text for h in hyps) for k in range(nbest)])
        return out

    return Plan(settings, answer, lines, texts)


def check_file_fields(fields: dict) -> Upload:
    """POST /translate_file's upload once its fields are as LibreTranslate requires them (`file`, `source`,
    `target`), else its 400."""
    for name in ("file", "source", "target"):
        if fields.get(name) in (None, ""):
            raise ApiError(400, f"Invalid request: missing {name} parameter")
    upload = fields["file"]
    if not isinstance(upload, Upload):
        raise ApiError(400, "Invalid request: file must be a file part of a multipart/form-data body")
    if not upload.filename:
        raise ApiError(400, "Invalid request: empty file")
    return upload


def _alternatives(value: object, most: int) -> int:
    """LibreTranslate's `alternatives` (a count, 0 by default; a form sends it as text), within the beam limit."""
    if value in (None, ""):
        return 0
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise ApiError(400, f"Invalid request: alternatives must be an integer in [0, {most}], got {short(value)}")
    return value
