"""What one request asks of the decoder, bounded: the limits on its search controls and output lengths, and each
line's weight in the batcher's budgets (batcher.py).

The limits (ServeConfig; past one, a 400 naming the setting's flag and value; docs/serving.md):
- `--max-phrases` constraint phrases per line, `--max-phrase-pieces` target pieces per phrase,
  `--max-constraint-pieces` pieces of one line's phrases together, `--max-prefix-pieces` pieces of its prefix.
  Constrained search follows every phrase in every hypothesis at every step (decoding/constraints.py): its Python
  work grows with the beam times the square of the pieces, so a few hundred phrases stall a decoder for minutes.
- `--max-output-pieces`: the longest output a request's own `max_len_a` / `max_len_b` allow one of its lines,
  floor(a * S + b) with S the line's source tokens, capped by the model's positions (decoding/steps.py). A request
  that leaves both to the checkpoint's settings is not refused: those are the operator's.
Phrases and prefixes are cut into target pieces as the translator cuts them (decoding/steering.py), so a limit
counts what the search would get.

A line's weight is its source tokens, plus its prefix pieces, plus CONSTRAINT_WEIGHT per constraint piece: a
constrained line is searched apart with a wider beam (`decode.glossary_beam_size` for glossary terms only, else
`decode.constraint_beam_size`) and costs several plain ones. The batcher's rounds (`--batch-tokens`, shared by the
requests in turn) count these weights.

Everything here tokenizes: the routes call it off the event loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from transformer.config import ServeConfig
from transformer.serving.engine import Settings
from transformer.serving.requests import ApiError

CONSTRAINT_WEIGHT = 16  # source tokens a constraint piece counts for in the batcher's budgets


@dataclass(frozen=True)
class WorkLimits:
    """The server's bounds on one line's search controls and output length (ServeConfig's `max_*` settings)."""

    phrases: int  # constraint phrases per line
    phrase_pieces: int  # target pieces per phrase
    constraint_pieces: int  # target pieces of a line's phrases together
    prefix_pieces: int  # target pieces of a line's prefix
    output_pieces: int  # the longest output a request's max_len_a / max_len_b may allow a line

    @classmethod
    def of(cls, serve: ServeConfig) -> WorkLimits:
        return cls(
            phrases=serve.max_phrases,
            phrase_pieces=serve.max_phrase_pieces,
            constraint_pieces=serve.max_constraint_pieces,
            prefix_pieces=serve.max_prefix_pieces,
            output_pieces=serve.max_output_pieces,
        )


def _refuse(what: str, limit: int, flag: str) -> ApiError:
    return ApiError(400, f"Invalid request: {what}, past the server's limit of {limit} ({flag})")


def measure(
    engine, lines: list[str], settings: Settings, controls: dict[str, list], limits: WorkLimits
) -> tuple[list[int], list[int]]:
    """(each line's source tokens, each line's weight: source tokens + prefix pieces + CONSTRAINT_WEIGHT x constraint
    pieces) once the request's controls and lengths are within `limits`; else the 400 naming the first limit
    passed. `engine`: Engine's `source_tokens`, `target_pieces`, `defaults` and `max_positions`."""
    sources = engine.source_tokens(lines)
    _check_lengths(engine, sources, dict(settings.decode), limits)
    prefixes = _prefix_pieces(engine, controls.get("prefix"), limits, len(lines))
    constraints = _constraint_pieces(engine, controls.get("constraints"), limits, len(lines))
    return sources, [s + p + CONSTRAINT_WEIGHT * c for s, p, c in zip(sources, prefixes, constraints)]


def _check_lengths(engine, sources: list[int], decode: dict, limits: WorkLimits) -> None:
    """The output length a request's own max_len_a / max_len_b allow its longest line, within the limit."""
    if "max_len_a" not in decode and "max_len_b" not in decode:
        return
    a = decode.get("max_len_a", engine.defaults.max_len_a)
    b = decode.get("max_len_b", engine.defaults.max_len_b)
    for number, tokens in enumerate(sources, start=1):
        longest = min(math.floor(a * tokens + b + 1e-6), engine.max_positions - 1)  # as decoding/steps.py counts
        if tokens and longest > limits.output_pieces:
            what = (
                f"max_len_a {a:g} and max_len_b {b} allow line {number} ({tokens} source tokens) {longest} output "
                "pieces"
            )
            raise _refuse(what, limits.output_pieces, "output pieces per line, --max-output-pieces")


def _prefix_pieces(engine, prefixes: list[str] | None, limits: WorkLimits, n_lines: int) -> list[int]:
    if prefixes is None:
        return [0] * n_lines
    counts = engine.target_pieces(prefixes)
    for number, count in enumerate(counts, start=1):
        if count > limits.prefix_pieces:
            what = f"line {number}'s prefix has {count} target pieces"
            raise _refuse(what, limits.prefix_pieces, "prefix pieces per line, --max-prefix-pieces")
    return counts


def _constraint_pieces(engine, phrase_lists: list[list[str]] | None, limits: WorkLimits, n_lines: int) -> list[int]:
    """Each line's constraint pieces in all; the phrases are counted before any is cut into pieces."""
    if phrase_lists is None:
        return [0] * n_lines
    kept = [[phrase for phrase in phrases if phrase.strip()] for phrases in phrase_lists]  # as steering.py keeps
    for number, phrases in enumerate(kept, start=1):
        if len(phrases) > limits.phrases:
            what = f"line {number} has {len(phrases)} constraint phrases"
            raise _refuse(what, limits.phrases, "phrases per line, --max-phrases")
    totals = []
    for number, phrases in enumerate(kept, start=1):
        counts = engine.target_pieces(phrases) if phrases else []
        for place, count in enumerate(counts, start=1):
            if count > limits.phrase_pieces:
                what = f"line {number}'s constraint phrase {place} has {count} target pieces"
                raise _refuse(what, limits.phrase_pieces, "pieces per phrase, --max-phrase-pieces")
        if sum(counts) > limits.constraint_pieces:
            what = f"line {number}'s constraint phrases have {sum(counts)} target pieces"
            raise _refuse(what, limits.constraint_pieces, "constraint pieces per line, --max-constraint-pieces")
        totals.append(sum(counts))
    return totals
