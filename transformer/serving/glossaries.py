"""Glossaries in the server: named glossaries loaded at start (`transformer-serve --glossary NAME=FILE`, repeatable),
chosen per request by name, and terms given in a native request itself.

- Both APIs read `glossary`: the name of one of the server's glossaries ("" or absent: none; an unknown name is a
  400 naming the server's). The native API also reads `glossary_terms`: a list of [source, target] (or [source,
  target, cased]) pairs, matched with the named glossary's terms, winning ties against them (decoding/glossary.py).
- The terms a line holds become its constraints, after the request's own (`constraints`, native API), as the
  Python API merges them (glossary.py's `merged`). So they count against the server's bounds on constraint work
  (work.py: `--max-phrases`, `--max-phrase-pieces`, `--max-constraint-pieces`), and past one the request is a 400
  naming it; the terms a line does not hold cost nothing.
- A request whose lines hold no term is decoded as without a glossary (no constraints are added to it).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from transformer.decoding.glossary import Glossary, merged, term_targets
from transformer.errors import UserError
from transformer.serving.engine import Settings
from transformer.serving.requests import ApiError, short

log = logging.getLogger(__name__)
FIELDS = ("glossary", "glossary_terms")  # the request fields read here (glossary_terms: the native API only)


def load_named(specs: Sequence[str]) -> dict[str, Glossary]:
    """`--glossary NAME=FILE` values -> {NAME: the loaded glossary}; a bad value or file is one `UserError`."""
    named: dict[str, Glossary] = {}
    for spec in specs:
        name, equals, path = spec.partition("=")
        name = name.strip()
        if not equals or not name or not path:
            raise UserError(f"--glossary {spec!r}: write NAME=FILE, e.g. --glossary bible=terms.tsv")
        if name in named:
            raise UserError(f"--glossary: the name {name!r} is given twice; give each glossary its own name")
        named[name] = Glossary.load(path)
        log.info("glossary %s: %d terms from %s", name, len(named[name]), path)
    return named


def _chosen(fields: dict, named: dict[str, Glossary], per_request: bool) -> list[Glossary]:
    """The request's glossaries, its own terms first; [] for none."""
    chosen = []
    if per_request and fields.get("glossary_terms") not in (None, []):
        try:
            chosen.append(Glossary.from_pairs(fields["glossary_terms"]))
        except UserError as exc:
            raise ApiError(400, f"Invalid request: {exc}") from None
    name = fields.get("glossary")
    if name not in (None, ""):
        if not isinstance(name, str) or name not in named:
            have = f"the server's are {', '.join(sorted(named))}" if named else "the server has none"
            raise ApiError(400, f"Invalid request: unknown glossary {short(name)}; {have} (--glossary NAME=FILE)")
        chosen.append(named[name])
    return chosen


def with_glossary(
    fields: dict,
    lines: list[str],
    settings: Settings,
    controls: dict[str, list],
    named: dict[str, Glossary],
    *,
    per_request: bool = True,
) -> tuple[Settings, dict[str, list]]:
    """(settings, controls) of a request with the terms each line holds merged into its constraints; as they were
    when the request names no glossary or its lines hold no term. per_request: read `glossary_terms` too."""
    glossaries = [g for g in _chosen(fields, named, per_request) if g]
    targets = [term_targets(line, glossaries) if glossaries else [] for line in lines]
    if not any(targets):
        return settings, controls
    given = controls.get("constraints") or [[] for _ in lines]
    controls = {**controls, "constraints": [merged(p, t) for p, t in zip(given, targets)]}
    return dataclasses.replace(settings, controls=tuple(sorted(controls))), controls
