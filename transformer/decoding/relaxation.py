"""When the controls of a search conflict: a line never ends without a translation.

A prefix, constraints that fit (steering.py's check) and repetition blocking can each be met alone, but not always
together: blocking may forbid the only pieces a tight constraint or a prefix leaves, and the line then ends with no
hypothesis (beam search) or with one of probability 0 (greedy decoding, sampling). `search_relaxed` searches such
lines again, and only them, with their controls set aside one at a time, in `RELAXATIONS`' order, until each has a
translation:

1. "no_repeat_ngram_size": repetition blocking, a preference of style, goes first;
2. "max_ngram_repeats": the limit on runs of a repeated n-gram, a guard against loops, next (a prefix or a
   phrase that holds such a run asks for it);
3. "constraints": the phrases the caller asked for, kept while anything else can give way;
4. "prefix": the last, needed only by a model that gives a forced piece probability 0.

Each relaxed line gets a warning naming its line number and what was set aside, and its translations carry the names
(translator.py's `Translation.relaxed`), as do those of a line whose constraints were set aside before the search
because they cannot fit (steering.py's `checked`; `steered_search` does both). A line that still has no hypothesis
with every control set aside (only a model giving every piece probability 0) gets an empty one of score -inf, with a
warning.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from transformer.config import DecodeConfig
from transformer.decoding.search import generate, max_output_lengths
from transformer.decoding.steering import Steering, checked, search_controls
from transformer.decoding.steps import NEG_INF, Hypothesis

log = logging.getLogger(__name__)

RELAXATIONS = ("no_repeat_ngram_size", "max_ngram_repeats", "constraints", "prefix")  # the order they are set aside
DESCRIPTIONS = {
    "no_repeat_ngram_size": "repetition blocking (no_repeat_ngram_size)",
    "max_ngram_repeats": "the limit on repeated n-grams in a row (max_ngram_repeats)",
    "constraints": "the constraints",
    "prefix": "the prefix",
}

# search(lines, settings, steerings) -> those lines' hypotheses: lines are places in the batch, steerings theirs
Search = Callable[[list[int], DecodeConfig, list[Steering | None]], list[list[Hypothesis]]]


def translated(hypotheses: Sequence[Hypothesis]) -> bool:
    """Whether a line's search found a translation: at least one hypothesis, and none of probability 0."""
    return bool(hypotheses) and all(math.isfinite(h.score) for h in hypotheses)


def _holds(name: str, settings: DecodeConfig, steering: Steering | None) -> bool:
    """Whether the control `name` is on for a line."""
    if name in ("no_repeat_ngram_size", "max_ngram_repeats"):
        return getattr(settings, name) > 0
    return bool(steering and (steering.phrases if name == "constraints" else steering.prefix))


def _set_aside(name: str, settings: DecodeConfig, steerings: list[Steering | None], lines: list[int]) -> DecodeConfig:
    """The settings without the control `name`; `lines`' steerings lose it in place."""
    if name in ("no_repeat_ngram_size", "max_ngram_repeats"):
        return replace(settings, **{name: 0})
    aside = dict(phrases=[], words=()) if name == "constraints" else dict(prefix=[])
    for b in lines:
        steerings[b] = replace(steerings[b], **aside)
    return settings


def search_relaxed(
    search: Search, settings: DecodeConfig, steerings: Sequence[Steering | None], numbers: Sequence[int]
) -> tuple[list[list[Hypothesis]], list[tuple[str, ...]]]:
    """Each line's hypotheses, and the controls set aside for it (in `RELAXATIONS`' order; () for most lines).
    steerings: the lines' prefixes and constraints as the search takes them; numbers: their input line numbers."""
    steerings = list(steerings)
    found = search(list(range(len(steerings))), settings, steerings)
    relaxed: list[tuple[str, ...]] = [() for _ in steerings]
    failed = [b for b, hyps in enumerate(found) if not translated(hyps)]
    for name in RELAXATIONS:
        lines = [b for b in failed if _holds(name, settings, steerings[b])]
        if not lines:
            continue
        settings = _set_aside(name, settings, steerings, lines)
        for b, hyps in zip(lines, search(lines, settings, [steerings[b] for b in lines])):
            found[b], relaxed[b] = hyps, relaxed[b] + (name,)
        failed = [b for b in failed if not translated(found[b])]
    for b, names in enumerate(relaxed):
        if names:
            what = " and ".join(DESCRIPTIONS[name] for name in names)
            log.warning(
                "line %d: no translation met every control of the search: translated without %s", numbers[b], what
            )
    for b in failed:
        log.warning("line %d: no translation of probability above 0, even with every control set aside", numbers[b])
        found[b] = found[b] or [Hypothesis([], NEG_INF, NEG_INF)]
    return found, relaxed


def steered_search(
    model,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    settings: DecodeConfig,
    steerings: Sequence[Steering | None],
    numbers: Sequence[int],
    *,
    bos_id: int,
    eos_id: int,
    generator: torch.Generator | None = None,
    continuations: torch.Tensor | None = None,
) -> tuple[list[list[Hypothesis]], list[tuple[str, ...]]]:
    """A batch's search (search.py's `generate`) with its lines' prefixes and constraints: src (B, S) long, src_mask
    (B, 1, 1, S) bool, steerings the lines' (None: nothing asked), numbers their input line numbers, continuations
    the pieces a glossary term is never followed by (steering.py's `word_continuations`) -> each line's
    hypotheses (best first) and the controls set aside for it, in `RELAXATIONS`' order: constraints that cannot fit,
    before the search (steering.py's `checked`), and those relaxed where the controls conflicted (`search_relaxed`)."""
    before: list[tuple[str, ...]] = [()] * len(steerings)
    if any(steerings):
        limits = max_output_lengths(model, src_mask, settings.max_len_a, settings.max_len_b).tolist()
        checks = [checked(s, limit, number) for s, limit, number in zip(steerings, limits, numbers)]
        steerings, before = [s for s, _ in checks], [names for _, names in checks]

    def search(rows: list[int], settings: DecodeConfig, steerings: list[Steering | None]) -> list[list[Hypothesis]]:
        part, mask, controls = src, src_mask, []
        if len(rows) < src.size(0):  # searched again: the lines whose controls conflicted
            index = torch.tensor(rows, device=src.device)  # (B',)
            part, mask = src[index], src_mask[index]  # (B', S), (B', 1, 1, S)
        if any(steerings):
            limits = max_output_lengths(model, mask, settings.max_len_a, settings.max_len_b).tolist()
            controls = search_controls(steerings, limits, src.device, continuations)
        ids = dict(bos_id=bos_id, eos_id=eos_id)
        return generate(model, part, mask, settings, generator=generator, controls=controls, **ids)

    hypotheses, during = search_relaxed(search, settings, steerings, numbers)
    return hypotheses, [tuple(name for name in RELAXATIONS if name in b + d) for b, d in zip(before, during)]
