"""The native API, POST /api/translate: what the Python API offers, within the server's limits.

Request (JSON): `q` (a sentence, or a list of sentences: one line each, no newlines inside), `source` and `target`
(a language code each, or `auto` for the source; both may be left out on a one-pair server), and optionally
`beam_size`, `nbest`, `alpha`, `length_penalty`, `max_len_a`, `max_len_b`, `min_len` (DecodeConfig's fields, each
within the server's limits), `alignment` (true: word links per hypothesis), `alignment_layer`, the per-line search
controls of engine.CONTROLS (`prefix`: one string per line, "" for none; `constraints`: one list of strings per
line, [] for none), `replace_unk` (true/false), `glossary` (a name of the server's glossaries) and `glossary_terms`
(a list of [source, target] pairs: glossaries.py), `protect`, `protect_numbers`, `protect_patterns` (protected.py),
and `api_key`.
Answer: `{"translations": [[hypothesis, ...], ...]}`, one list per line of `q` (best first), each hypothesis
`{"text", "score", "log_prob", "tokens", "relaxed", "unmet", "confidence", "protected", "by_position"}` (tokens: the
number of output pieces;
relaxed: the controls set aside for the line, unmet: the constraint phrases the hypothesis misses; confidence: in
[0, 1], decoding/confidence.py, 4 decimals) and, with `alignment`, `"alignment": [[source word, target word], ...]`.
The answer's `confidence_threshold`: the checkpoint's default threshold, chosen on its validation set (null: the
checkpoint has no calibration and the confidences are uncalibrated, or the route is pivoted); `route`: the
languages the translation went through (`["es", "en"]`, or `["es", "en", "de"]` through the pivot:
routing.py says what a pivoted hypothesis holds); with `source: auto`, `detectedLanguage`.
"""

from __future__ import annotations

import math

from transformer.config import DecodeConfig, choices
from transformer.serving.engine import CONTROLS, OPTIONS, Settings
from transformer.serving.glossaries import FIELDS as GLOSSARY_FIELDS
from transformer.serving.protected import FIELDS as PROTECTION_FIELDS
from transformer.serving.protected import request_protection
from transformer.serving.requests import ApiError, check_lines, short

SEARCH = ("beam_size", "alpha", "length_penalty", "max_len_a", "max_len_b", "min_len")  # DecodeConfig fields
FIELDS = (
    "q",
    "source",
    "target",
    "api_key",
    *SEARCH,
    "nbest",
    "alignment",
    "alignment_layer",
    *CONTROLS,
    *OPTIONS,
    *GLOSSARY_FIELDS,
    *PROTECTION_FIELDS,
)
ENTRY = {  # what one line's entry of each control is
    "prefix": ("a string", lambda v: isinstance(v, str)),
    "constraints": ("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
}
MAX_ALPHA = 10.0  # the largest length-penalty exponent a request may ask for


def _bad(name: str, what: str, value: object) -> ApiError:
    return ApiError(400, f"Invalid request: {name} must be {what}, got {short(value)}")


def integer_field(value: object, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _bad(name, f"an integer in [{low}, {high}]", value)
    return value


def _real(value: object, name: str, low: float, high: float) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not low <= value <= high:
        raise _bad(name, f"a number in [{low}, {high}]", value)
    return float(value)


def _lines(q: object) -> list[str]:
    items = [q] if isinstance(q, str) else q
    if not isinstance(items, list) or not items or not all(isinstance(item, str) for item in items):
        raise _bad("q", "a string or a non-empty list of strings", q)
    if any("\n" in item or "\r" in item for item in items):
        raise ApiError(400, "Invalid request: q's items are single lines (one sentence each, no newline)")
    return items


def _search(fields: dict, *, max_beam: int, max_len_a: float, max_len_b: int) -> dict:
    """The DecodeConfig fields a request replaces, checked against the server's limits."""
    checks = {
        "beam_size": lambda v: integer_field(v, "beam_size", 1, max_beam),
        "alpha": lambda v: _real(v, "alpha", 0.0, MAX_ALPHA),
        "max_len_a": lambda v: _real(v, "max_len_a", 0.0, max_len_a),
        "max_len_b": lambda v: integer_field(v, "max_len_b", 0, max_len_b),
        "min_len": lambda v: integer_field(v, "min_len", 0, max_len_b),
    }
    search = {name: checks[name](fields[name]) for name in checks if fields.get(name) is not None}
    penalty = fields.get("length_penalty")
    if penalty is not None:
        if penalty not in choices(DecodeConfig, "length_penalty"):
            raise _bad("length_penalty", " or ".join(choices(DecodeConfig, "length_penalty")), penalty)
        search["length_penalty"] = penalty
    return search


def _controls(fields: dict, n_lines: int, single: bool) -> dict[str, list]:
    """The per-line search controls given: one entry per line of a list `q`; for a string `q`, its one entry."""
    controls = {}
    for name in CONTROLS:
        value = fields.get(name)
        if value is None:
            continue
        entries = [value] if single else value
        if not isinstance(entries, list) or len(entries) != n_lines:
            raise _bad(name, f"a list with one entry per line of q ({n_lines})", value)
        what, valid = ENTRY[name]
        if not all(valid(entry) for entry in entries):
            raise _bad(name, f"one entry per line, each {what}", value)
        controls[name] = entries
    return controls


def _options(fields: dict) -> tuple[tuple[str, bool], ...]:
    """The switches given (true/false)."""
    options = []
    for name in OPTIONS:
        value = fields.get(name)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise _bad(name, "true or false", value)
        options.append((name, value))
    return tuple(options)


def plan_native(
    fields: dict,
    defaults: DecodeConfig,
    *,
    max_lines: int,
    max_chars: int,
    max_beam: int,
    max_len_a: float,
    max_len_b: int,
) -> tuple[list[str], Settings, dict[str, list]]:
    """(lines, settings, per-line controls) of a native request, or the 400 naming its first problem."""
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ApiError(400, f"Invalid request: unknown field(s) {short(unknown)}; the fields are {', '.join(FIELDS)}")
    lines = _lines(fields.get("q"))
    check_lines(lines, max_lines, max_chars)
    search = _search(fields, max_beam=max_beam, max_len_a=max_len_a, max_len_b=max_len_b)
    beam = search.get("beam_size", defaults.beam_size)
    nbest = integer_field(fields.get("nbest", 1), "nbest", 1, min(beam, max_beam))
    alignment = fields.get("alignment", False)
    if not isinstance(alignment, bool):
        raise _bad("alignment", "true or false", alignment)
    layer = fields.get("alignment_layer")
    if layer is not None:
        integer_field(layer, "alignment_layer", -64, 63)
    controls = _controls(fields, len(lines), isinstance(fields["q"], str))
    decode = tuple(sorted(search.items()))
    settings = Settings(
        decode=decode,
        nbest=nbest,
        alignment=alignment,
        alignment_layer=layer,
        controls=tuple(sorted(controls)),
        options=_options(fields),
        protection=request_protection(fields),
    )
    return lines, settings, controls


def hypotheses(results: list[list], alignment: bool, threshold: float | None = None) -> dict:
    """The answer: per line, its hypotheses as JSON objects; the confidence threshold beside them."""

    def hypothesis(t) -> dict:
        score, log_prob = (round(x, 6) if math.isfinite(x) else None for x in (t.score, t.log_prob))  # JSON: no -inf
        out = {"text": t.text, "score": score, "log_prob": log_prob, "tokens": len(t.tokens)}
        out |= {"relaxed": list(t.relaxed), "unmet": list(t.unmet)}  # controls set aside, phrases missed (decoding.md)
        out["confidence"] = round(t.confidence, 4)
        out |= {"protected": [list(span) for span in t.protected], "by_position": t.by_position}
        if alignment:
            out["alignment"] = [list(link) for link in t.alignment or []]
        return out

    translations = [[hypothesis(t) for t in hyps] for hyps in results]
    return {"translations": translations, "confidence_threshold": None if threshold is None else round(threshold, 4)}
