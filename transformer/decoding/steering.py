"""What a caller asks of one line's translation besides the source: a target prefix and lexical constraints, read
beside the input lines, and turned into the search controls of a batch (controls.py, constraints.py).

Decisions:
- A prefix is text, cut into target pieces as training targets are (`encode_tgt`); the output starts with exactly
  those pieces. A constraint is a phrase of text, cut the same way; the output must contain its pieces, contiguous,
  each phrase once, in any order. An empty prefix or an empty list of phrases asks for nothing.
- An empty input line gives an empty translation, as without steering; its prefix and constraints are read and
  left unused. Lines, prefixes and constraints are read together, lazily; a prefix or constraint list too many or
  too few is a `UserError` naming the line.
- What cannot be done is reported, never dropped in silence: a sentence whose phrases (with the prefix, less the
  phrases it already holds) need more pieces than its maximum output length is decoded without them, with a
  warning naming the line and the lengths; a prefix longer than the maximum length is cut there, with a warning;
  a search that ends at the maximum length before meeting every phrase is named in a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from transformer.data.tokenizer import EOS_ID
from transformer.decoding.constraints import LexicalConstraints
from transformer.decoding.controls import TargetPrefix
from transformer.errors import UserError

log = logging.getLogger(__name__)

_MISSING = object()


@dataclass(frozen=True)
class Steering:
    """One line's requests, as target ids."""

    prefix: list[int]  # the output starts with these pieces
    phrases: list[list[int]]  # the output contains each of these, in any order


def _next(values: Iterator | None, what: str, number: int, default: object):
    if values is None:
        return default
    value = next(values, _MISSING)
    if value is _MISSING:
        raise UserError(f"{what}: none for input line {number}; give one per input line (an empty one asks nothing)")
    return value


def steered(lines: Iterable[str], tokenizer, prefix: Iterable[str] | None, constraints: Iterable | None) -> Iterator:
    """(line, Steering or None) for each line, the prefixes and constraint lists read beside the lines."""
    prefixes = None if prefix is None else iter(prefix)
    phrase_lists = None if constraints is None else iter(constraints)
    number = 0
    for number, line in enumerate(lines, start=1):
        text = _next(prefixes, "prefix", number, "")
        phrases = _next(phrase_lists, "constraints", number, [])
        if isinstance(phrases, str) or not all(isinstance(p, str) for p in phrases):
            raise UserError(f"constraints for input line {number}: give a list of phrases (strings), got {phrases!r}")
        phrases = [p.strip() for p in phrases if p.strip()]
        if not text.strip() and not phrases:
            yield line, None
            continue
        ids = tokenizer.encode_tgt([text.strip()] + phrases) if text.strip() else [[]] + tokenizer.encode_tgt(phrases)
        yield line, Steering(prefix=ids[0], phrases=[p for p in ids[1:] if p])
    for values, what in ((prefixes, "prefix"), (phrase_lists, "constraints")):
        if values is not None and next(values, _MISSING) is not _MISSING:
            raise UserError(f"more {what} entries than the {number} input lines; give one per input line")


def _contains(tokens: Sequence[int], phrase: Sequence[int]) -> bool:
    n = len(phrase)
    return any(list(tokens[i : i + n]) == list(phrase) for i in range(len(tokens) - n + 1))


def _feasible(steering: Steering, limit: int, number: int) -> list[list[int]]:
    """The phrases to decode with (all, or none with a warning when they cannot fit `limit` output pieces)."""
    if len(steering.prefix) > limit:
        log.warning(
            "line %d: the prefix has %d pieces, more than the maximum output length %d: cut there (raise --max-len-b)",
            number,
            len(steering.prefix),
            limit,
        )
    missing = [p for p in steering.phrases if not _contains(steering.prefix, p)]
    need = len(steering.prefix) + sum(len(p) for p in missing)
    if missing and need > limit:
        log.warning(
            "line %d: the constraints need %d output pieces (with the prefix), the maximum output length is "
            "%d: decoded without them (raise --max-len-b)",
            number,
            need,
            limit,
        )
        return []
    return steering.phrases


def search_controls(steerings: Sequence[Steering | None], limits: Sequence[int], numbers: Sequence[int], device):
    """The controls of one batch: its sentences' prefixes and constraints (None: nothing asked); limits: their
    maximum output lengths; numbers: their input line numbers, for the warnings."""
    if all(s is None for s in steerings):
        return []
    prefixes = [s.prefix if s else [] for s in steerings]
    phrases = [_feasible(s, n_max, number) if s else [] for s, n_max, number in zip(steerings, limits, numbers)]
    controls = [TargetPrefix(prefixes, device)] if any(prefixes) else []
    if any(phrases):
        controls.append(LexicalConstraints(phrases, eos_id=EOS_ID, limits=limits, device=device))
    return controls


def report_unmet(hypotheses: Sequence[Sequence], controls: Sequence, numbers: Sequence[int]) -> None:
    """A warning for each sentence whose best hypothesis misses a phrase the search was given (it met the maximum
    length); the phrases decoded without (`_feasible`) were reported before the search."""
    constraints = next((c for c in controls if isinstance(c, LexicalConstraints)), None)
    if constraints is None:
        return
    for hyps, phrases, number in zip(hypotheses, constraints.sets, numbers):
        if hyps and not all(_contains(hyps[0].tokens, p) for p in phrases.phrases):
            log.warning(
                "line %d: the search reached the maximum output length before meeting every constraint "
                "(raise --max-len-b or --beam)",
                number,
            )
