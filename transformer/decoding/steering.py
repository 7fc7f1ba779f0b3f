"""What a caller asks of one line's translation besides the source: a target prefix and lexical constraints, read
beside the input lines, and turned into the search controls of a batch (controls.py, constraints.py).

Decisions:
- A prefix is text, cut into target pieces as training targets are (`encode_tgt`); the output starts with exactly
  those pieces. A constraint is a phrase of text, cut the same way; the output must contain its pieces, contiguous,
  each phrase once, in any order. An empty prefix or an empty list of phrases asks for nothing.
- An empty input line gives an empty translation, as without steering; its prefix and constraints are read and
  left unused. Lines, prefixes and constraints are read together, lazily; a prefix or constraint list too many or
  too few is a `UserError` naming the line.
- A phrase is met as phrases.py's automaton meets it (each once, on pieces of its own, in any order): the
  feasibility check walks it over the prefix, the search follows it, and the report reads it over each output.
- A glossary (glossary.py) adds, to each line's constraints, the target terms of the terms the line holds, after the
  caller's phrases and each once; a line that holds none is steered as without it. A term is words: the search
  never continues its last word (`TermTarget`, `Steering.words`, `word_continuations`; constraints.py), where a
  caller's phrase may be the start of a word.
- What cannot be done is reported, never dropped in silence: a sentence whose phrases cannot all be met within its
  maximum output length after its prefix (`Phrases.fits`, the search's own budget) is decoded without them, with a
  warning naming the line and the lengths, and its translations say so (`relaxed`, `unmet`: relaxation.py); a
  prefix longer than the maximum length is cut there, with a warning.
"""

from __future__ import annotations

import logging
import re
import reprlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import torch

from transformer.data.tokenizer import EOS_ID
from transformer.decoding.constraints import LexicalConstraints
from transformer.decoding.controls import TargetPrefix
from transformer.decoding.glossary import Glossary, TermTarget, merged
from transformer.decoding.phrases import Phrases
from transformer.errors import UserError

log = logging.getLogger(__name__)

_MISSING = object()
WORD_START = "\u2581"  # SentencePiece's mark of a piece that begins a word
WORD_CHAR = re.compile(r"\w")
_SHORT = reprlib.Repr()  # a value in a message: bounded in length and depth (a list nested 10,000 deep included)
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxstring = 3, 4, 40


@dataclass(frozen=True)
class Steering:
    """One line's requests, as target ids."""

    prefix: list[int]  # the output starts with these pieces
    phrases: list[list[int]]  # the output contains each of these, in any order
    texts: tuple[str, ...]  # the phrases as given (stripped), one per phrase: what the report names
    words: tuple[bool, ...] = ()  # per phrase, True for a glossary term (`TermTarget`): it ends a word


def _next(values: Iterator | None, what: str, number: int, default: object):
    if values is None:
        return default
    value = next(values, _MISSING)
    if value is _MISSING:
        raise UserError(f"{what}: none for input line {number}; give one per input line (an empty one asks nothing)")
    return value


def _check_text(text: str, number: int) -> None:
    """A prefix or phrase is text: a lone surrogate (JSON's "\\ud800" escape gives one) is refused, naming the line."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UserError(
            f"prefix or constraints for input line {number}: {_SHORT.repr(text)} holds a lone surrogate "
            "(\\ud800-\\udfff), which is not text"
        ) from None


def steered(
    lines: Iterable[str],
    tokenizer,
    prefix: Iterable[str] | None,
    constraints: Iterable | None,
    glossary: Glossary | None = None,
) -> Iterator:
    """(line, Steering or None) for each line, the prefixes and constraint lists read beside the lines, and the
    glossary's target terms of the terms each line holds merged into its constraints (glossary.py)."""
    prefixes = None if prefix is None else iter(prefix)
    phrase_lists = None if constraints is None else iter(constraints)
    number = 0
    for number, line in enumerate(lines, start=1):
        text = _next(prefixes, "prefix", number, "")
        phrases = _next(phrase_lists, "constraints", number, [])
        if isinstance(phrases, str) or not all(isinstance(p, str) for p in phrases):
            raise UserError(
                f"constraints for input line {number}: give a list of phrases (strings), got {_SHORT.repr(phrases)}"
            )
        if not isinstance(text, str):
            raise UserError(f"prefix for input line {number}: give a string, got {_SHORT.repr(text)}")
        for value in (text, *phrases):
            _check_text(value, number)
        phrases = [p for p in phrases if p.strip()]
        if glossary:
            phrases = merged(phrases, glossary.targets(line))
        if not text.strip() and not phrases:
            yield line, None
            continue
        texts = [p.strip() for p in phrases]
        ids = tokenizer.encode_tgt([text.strip()] + texts) if text.strip() else [[]] + tokenizer.encode_tgt(texts)
        kept = [(i, t, isinstance(p, TermTarget)) for i, t, p in zip(ids[1:], texts, phrases) if i]  # no pieces: none
        pieces, texts, words = ([k[n] for k in kept] for n in range(3))
        yield line, Steering(prefix=ids[0], phrases=pieces, texts=tuple(texts), words=tuple(words))
    for values, what in ((prefixes, "prefix"), (phrase_lists, "constraints")):
        if values is not None and next(values, _MISSING) is not _MISSING:
            raise UserError(f"more {what} entries than the {number} input lines; give one per input line")


def checked(steering: Steering | None, limit: int, number: int) -> tuple[Steering | None, tuple[str, ...]]:
    """A line's steering as the search gets it, and what was set aside before the search: its phrases (with a
    warning) when they cannot all be met in `limit` output pieces after the prefix (`Phrases.fits`). A prefix
    longer than `limit` is kept, cut there by the search, with a warning."""
    if steering is None:
        return None, ()
    if len(steering.prefix) > limit:
        log.warning(
            "line %d: the prefix has %d pieces, more than the maximum output length %d: cut there (raise --max-len-b)",
            number,
            len(steering.prefix),
            limit,
        )
    if not steering.phrases or _fits(steering, limit):
        return steering, ()
    log.warning(
        "line %d: the constraints need at least %d output pieces (with the prefix), the maximum output length is "
        "%d: decoded without them (raise --max-len-b)",
        number,
        _needed(steering, limit),
        limit,
    )
    return replace(steering, phrases=[], words=()), ("constraints",)


def _fits(steering: Steering, limit: int) -> bool:
    """Whether the search can meet the phrases; more pieces than `limit` in all never fit (nor is their automaton
    built: a line of many phrases costs no more than its length)."""
    return sum(len(p) for p in steering.phrases) <= limit and Phrases(steering.phrases).fits(steering.prefix, limit)


def _needed(steering: Steering, limit: int) -> int:
    pieces = sum(len(p) for p in steering.phrases)
    return pieces if pieces > limit else max(Phrases(steering.phrases).needed(steering.prefix), limit + 1)


def search_controls(
    steerings: Sequence[Steering | None], limits: Sequence[int], device, continuations: torch.Tensor | None = None
) -> list:
    """The controls of one batch: its sentences' prefixes and constraints (None: nothing asked; checked first with
    `checked`); limits: their maximum output lengths; continuations: the pieces a glossary term is never followed by
    (`word_continuations`; None: terms end anywhere)."""
    if all(s is None for s in steerings):
        return []
    prefixes = [s.prefix if s else [] for s in steerings]
    phrases = [s.phrases if s else [] for s in steerings]
    controls = [TargetPrefix(prefixes, device)] if any(prefixes) else []
    if any(phrases):
        ends = dict(word_ends=[s.words if s else () for s in steerings], continuations=continuations)
        controls.append(LexicalConstraints(phrases, eos_id=EOS_ID, limits=limits, device=device, **ends))
    return controls


def word_continuations(tokenizer) -> torch.Tensor:
    """(V,) bool over the target pieces: True for a piece that continues the word before it, a word character first
    and no SentencePiece word start ("s", "her", "ed"; not "\u2581and", ",", "'s", "<unk>"): what a glossary term's
    last piece is never followed by (constraints.py)."""
    pieces = tokenizer.pieces("tgt")
    return torch.tensor([not p.startswith(WORD_START) and WORD_CHAR.match(p) is not None for p in pieces])


def unmet_texts(steering: Steering | None, outputs: Sequence[Sequence[int]]) -> list[tuple[str, ...]]:
    """For each output (target ids), the phrases (as given) it does not meet, by the one definition (phrases.py)."""
    if steering is None or not steering.phrases:
        return [() for _ in outputs]
    automaton = Phrases(steering.phrases)
    return [tuple(steering.texts[i] for i in automaton.unmet(tokens)) for tokens in outputs]
