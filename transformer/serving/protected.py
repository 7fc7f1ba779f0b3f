"""A request's protected spans: the fields `protect` (true/false, default true), `protect_numbers` (true/false,
default true) and `protect_patterns` (a regular expression, or a list of them, each match kept as written), in
POST /translate, /api/translate and /translate_file (where a form sends them as text: "false", a pattern, or a
JSON list of patterns). A bad value or a pattern that could take exponential time is a 400 naming it.
"""

from __future__ import annotations

import json

from transformer.documents.spans import Protection
from transformer.errors import UserError
from transformer.serving.requests import ApiError, short

FIELDS = ("protect", "protect_numbers", "protect_patterns")


def _switch(fields: dict, name: str) -> bool:
    value = fields.get(name)
    if value is None or value == "":
        return True
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise ApiError(400, f"Invalid request: {name} must be true or false, got {short(value)}")
    return value


def _patterns(value: object) -> tuple[str, ...]:
    if value in (None, "", []):
        return ()
    if isinstance(value, str) and value.lstrip().startswith("["):  # a form's JSON list
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ApiError(400, "Invalid request: protect_patterns is not a JSON list of strings") from None
    patterns = [value] if isinstance(value, str) else value
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise ApiError(
            400, f"Invalid request: protect_patterns must be a string or a list of strings, got {short(value)}"
        )
    return tuple(patterns)


def request_protection(fields: dict) -> Protection:
    """The request's `Protection` (see the module docstring), or its 400."""
    enabled, numbers = _switch(fields, "protect"), _switch(fields, "protect_numbers")
    patterns = _patterns(fields.get("protect_patterns"))
    try:
        return Protection(enabled=enabled, numbers=numbers, patterns=patterns) if enabled else Protection.off()
    except UserError as exc:
        raise ApiError(400, f"Invalid request: {exc}") from None
