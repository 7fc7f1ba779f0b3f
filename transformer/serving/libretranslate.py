"""LibreTranslate's API: POST /translate and /languages, with its request fields, answers and error messages.

POST /translate reads `q` (a string, or a list of strings), `source`, `target`, `format` (`text` or `html`),
`alternatives` and `api_key` from a JSON body, a form or a multipart body (requests.py), and answers
`{"translatedText": ...}`: a string for a string `q`, a list for a list. With `source: auto` the answer adds
`detectedLanguage` (the model's one source language, confidence 100: nothing is detected). With `alternatives: N`
it adds `alternatives`, the next N hypotheses of the beam (a list per item for a list `q`). A `q` with several
lines is translated line by line and joined back with newlines; `format: html` keeps the markup (html_text.py).
Errors are LibreTranslate's: 400 with "Invalid request: missing q parameter", "xx is not supported",
"xml format is not supported", ..., each as `{"error": "..."}`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformer.serving.engine import Settings
from transformer.serving.html_text import join_html, split_html, text_of
from transformer.serving.requests import ApiError, check_lines, short

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
    """What one /translate request decodes, and how its answer is built from the results (one list per line)."""

    lines: list[str]
    settings: Settings
    answer: Callable[[list[list]], dict]


def plan_translate(
    fields: dict, language_pair: tuple[str, str], *, max_lines: int, max_chars: int, max_beam: int, beam_size: int
) -> Plan:
    """Check a /translate request's fields (LibreTranslate's errors) and plan its decoding."""
    items, text_format = _checked(fields, language_pair)
    single, source = isinstance(fields["q"], str), fields["source"]
    alternatives = _alternatives(fields.get("alternatives"), max_beam - 1)
    split = _html_lines if text_format == "html" else _text_lines
    per_item = [split(item) for item in items]
    lines = [line for item_lines, _ in per_item for line in item_lines]
    check_lines(lines, max_lines, max_chars)
    nbest = 1 + alternatives
    decode = (("beam_size", nbest),) if nbest > beam_size else ()
    extra = {"detectedLanguage": {"confidence": 100.0, "language": language_pair[0]}} if source == "auto" else {}

    def answer(results: list[list]) -> dict:
        texts, alternates, start = [], [], 0
        for item_lines, join in per_item:
            hyps = results[start : start + len(item_lines)]
            start += len(item_lines)
            texts.append(join([h[0].text for h in hyps]))
            alternates.append([join([h[min(k, len(h) - 1)].text for h in hyps]) for k in range(1, nbest)])
        body = {"translatedText": texts[0] if single else texts, **extra}
        if alternatives:
            body["alternatives"] = alternates[0] if single else alternates
        return body

    return Plan(lines, Settings(decode=decode, nbest=nbest), answer)


def _checked(fields: dict, language_pair: tuple[str, str]) -> tuple[list[str], str]:
    """(q's items, the format) once the fields are as LibreTranslate requires them, else its 400."""
    for name in ("q", "source", "target"):
        if fields.get(name) in (None, "", []):
            raise ApiError(400, f"Invalid request: missing {name} parameter")
    q = fields["q"]
    items = [q] if isinstance(q, str) else q
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ApiError(400, f"Invalid request: q must be a string or a list of strings, got {short(q)}")
    source, target, text_format = fields["source"], fields["target"], fields.get("format") or "text"
    for code, allowed in ((source, (language_pair[0], "auto")), (target, (language_pair[1],))):
        if code not in allowed:
            raise ApiError(400, f"{short(code)} is not supported")
    if text_format not in ("text", "html"):
        raise ApiError(400, f"{short(text_format)} format is not supported")
    return items, text_format


def _alternatives(value: object, most: int) -> int:
    """LibreTranslate's `alternatives` (a count, 0 by default; a form sends it as text), within the beam limit."""
    if value in (None, ""):
        return 0
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise ApiError(400, f"Invalid request: alternatives must be an integer in [0, {most}], got {short(value)}")
    return value


def _text_lines(item: str) -> tuple[list[str], Callable[[list[str]], str]]:
    """A text item's lines (CR LF and CR read as LF) and how their translations join back."""
    return item.replace("\r\n", "\n").replace("\r", "\n").split("\n"), "\n".join


def _html_lines(item: str) -> tuple[list[str], Callable[[list[str]], str]]:
    """An HTML item's text runs and how their translations go back between its tags."""
    pieces = split_html(item)
    return [text_of(p) for p in pieces if p.translated], lambda translations: join_html(pieces, translations)
