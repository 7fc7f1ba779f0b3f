"""LibreTranslate's API: POST /translate and /languages (and /translate_file's fields), with its request fields,
answers and error messages.

POST /translate reads `q` (a string, or a list of strings), `source`, `target`, `format` (`text` or `html`),
`alternatives` and `api_key` from a JSON body, a form or a multipart body (requests.py), and answers
`{"translatedText": ...}`: a string for a string `q`, a list for a list. With `source: auto` the answer adds
`detectedLanguage` (the model's one source language, confidence 100: nothing is detected). With `alternatives: N`
it adds `alternatives`, the next N hypotheses of the beam (a list per item for a list `q`). A `q` with several
lines is translated line by line and joined back with newlines; a `format: html` item is translated as an HTML
document, its markup kept and its inline tags placed by word alignment (documents.py). Placeholders, URLs, numbers,
code and the like are kept as written unless `protect` is false (protected.py).
Errors are LibreTranslate's: 400 with "Invalid request: missing q parameter", "xx is not supported",
"xml format is not supported", ..., each as `{"error": "..."}`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from transformer.serving.engine import Settings
from transformer.serving.protected import request_protection
from transformer.serving.requests import ApiError, Upload, check_lines, short

NAMES = {  # ISO 639-1 code -> English name, for /languages; other codes are named by themselves
    "ar": "Arabic",
    "cs": "Czech",
    "da": "Danish",
    "de": "German",
    "el": "Greek",
    "en": "English",
    "es": "Spanish",
    "fi": "Finnish",
    "fr": "French",
    "he": "Hebrew",
    "hi": "Hindi",
    "hu": "Hungarian",
    "it": "Italian",
    "ja": "Japanese",
    "ko": "Korean",
    "la": "Latin",
    "nl": "Dutch",
    "pl": "Polish",
    "pt": "Portuguese",
    "ro": "Romanian",
    "ru": "Russian",
    "sv": "Swedish",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "zh": "Chinese",
}


def languages(source: str, target: str) -> list[dict]:
    """GET/POST /languages: the model's source language (which translates into its target) and its target."""
    return [
        {"code": source, "name": NAMES.get(source, source), "targets": [target]},
        {"code": target, "name": NAMES.get(target, target), "targets": []},
    ]


@dataclass
class Plan:
    """What one /translate request decodes, and how its answer is built from each item's translations."""

    settings: Settings
    answer: Callable[[list[list[str]]], dict]  # from each item's translations: the best, then its alternatives
    lines: list[str] = field(default_factory=list)  # format text: the lines decoded
    texts: Callable[[list[list]], list[list[str]]] | None = None  # format text: each item's, from each line's results
    html: list[tuple[str, str]] | None = None  # format html: (name, item) of each, translated as a document


def plan_translate(
    fields: dict, language_pair: tuple[str, str], *, max_lines: int, max_chars: int, max_beam: int, beam_size: int
) -> Plan:
    """Check a /translate request's fields (LibreTranslate's errors) and plan its decoding."""
    items, text_format = _checked(fields, language_pair)
    single, source = isinstance(fields["q"], str), fields["source"]
    alternatives = _alternatives(fields.get("alternatives"), max_beam - 1)
    nbest = 1 + alternatives
    decode = (("beam_size", nbest),) if nbest > beam_size else ()
    settings = Settings(decode=decode, nbest=nbest, protection=request_protection(fields))
    extra = {"detectedLanguage": {"confidence": 100.0, "language": language_pair[0]}} if source == "auto" else {}

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


def check_file_fields(fields: dict, language_pair: tuple[str, str]) -> Upload:
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
    _check_languages(fields["source"], fields["target"], language_pair)
    return upload


def _checked(fields: dict, language_pair: tuple[str, str]) -> tuple[list[str], str]:
    """(q's items, the format) once the fields are as LibreTranslate requires them, else its 400."""
    for name in ("q", "source", "target"):
        if fields.get(name) in (None, "", []):
            raise ApiError(400, f"Invalid request: missing {name} parameter")
    q = fields["q"]
    items = [q] if isinstance(q, str) else q
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ApiError(400, f"Invalid request: q must be a string or a list of strings, got {short(q)}")
    text_format = fields.get("format") or "text"
    _check_languages(fields["source"], fields["target"], language_pair)
    if text_format not in ("text", "html"):
        raise ApiError(400, f"{short(text_format)} format is not supported")
    return items, text_format


def _check_languages(source: object, target: object, language_pair: tuple[str, str]) -> None:
    """The model's source (or `auto`) and target, else LibreTranslate's "xx is not supported"."""
    for code, allowed in ((source, (language_pair[0], "auto")), (target, (language_pair[1],))):
        if code not in allowed:
            raise ApiError(400, f"{short(code)} is not supported")


def _alternatives(value: object, most: int) -> int:
    """LibreTranslate's `alternatives` (a count, 0 by default; a form sends it as text), within the beam limit."""
    if value in (None, ""):
        return 0
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise ApiError(400, f"Invalid request: alternatives must be an integer in [0, {most}], got {short(value)}")
    return value
