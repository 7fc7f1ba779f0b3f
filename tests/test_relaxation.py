"""Controls that conflict (decoding/relaxation.py): a prefix, constraints and repetition blocking together on a tiny
vocabulary, against brute force over every output. Every line gets a translation; what was set aside is exactly
what brute force says had to be, in the documented order; and the report (`relaxed`, `unmet`) matches the output."""

from __future__ import annotations

import itertools
import logging
import random

import pytest
from conftest import BOS, EOS
from test_controls import ALLOWED, has_repeat, has_run, sequences
from test_decoding import one_source, random_model

from transformer.config import DecodeConfig
from transformer.decoding.relaxation import RELAXATIONS, steered_search
from transformer.decoding.steering import Steering, unmet_texts

IDS = dict(bos_id=BOS, eos_id=EOS)


def contains(tokens, phrase) -> bool:
    return any(tokens[i : i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


def steering(prefix: list[int], phrases: list[list[int]]) -> Steering:
    return Steering(prefix=prefix, phrases=phrases, texts=tuple(" ".join(map(str, p)) for p in phrases))


def meets(tokens, prefix, phrases, n: int, limit: int, repeats: int) -> bool:
    """Whether an output meets the controls: it is not empty, starts with the prefix (cut at the limit), contains
    every phrase (theirs share no piece, so containing is meeting), repeats no n-gram (n = 0: any) and has no
    n-gram more than `repeats` times in a row (0: any)."""
    starts = bool(tokens) and tokens[: min(len(prefix), limit)] == prefix[:limit]
    runs = repeats and has_run(tokens, repeats + 1)
    return starts and all(contains(tokens, p) for p in phrases) and not (n and has_repeat(tokens, n)) and not runs


def exists(prefix, phrases, n: int, limit: int, repeats: int = 0) -> bool:
    return any(meets(tokens, prefix, phrases, n, limit, repeats) for tokens, _ in sequences(limit))


def expected_relaxed(prefix, phrases, n: int, limit: int) -> tuple[str, ...]:
    """Brute force's answer: constraints that no output of `limit` pieces with the prefix can meet are set aside
    first; then, while no output meets what is left, the next control in the documented order."""
    aside = {"constraints"} if phrases and not exists(prefix, phrases, 0, limit) else set()
    for name in RELAXATIONS:
        left = dict(
            prefix=[] if "prefix" in aside else prefix,
            phrases=[] if "constraints" in aside else phrases,
            n=0 if "no_repeat_ngram_size" in aside else n,
            repeats=0 if "max_ngram_repeats" in aside else DecodeConfig().max_ngram_repeats,
        )
        if exists(limit=limit, **left):
            break
        aside.add(name)
    return tuple(name for name in RELAXATIONS if name in aside)


def cases():
    """(seed, prefix, phrases, limit, n) over {1, 4, 5}: phrases without a piece in common (one may repeat its own,
    as 4 4), often overlapping the prefix; limits of 1 to 5; blocking of 1- or 2-grams."""
    rng = random.Random(3)
    for seed in range(60):
        prefix = [rng.choice(ALLOWED) for _ in range(rng.randint(0, 3))]
        a, b, c = rng.sample(ALLOWED, 3)
        phrases = [rng.choice([[a], [a, b], [a, a]])] + ([[c]] if rng.random() < 0.4 else [])
        yield seed, prefix, phrases if rng.random() < 0.8 else [], rng.randint(1, 5), rng.choice([1, 1, 2])


@pytest.mark.parametrize("seed, prefix, phrases, limit, n", list(cases()))
def test_every_line_gets_a_translation_and_only_what_had_to_go_is_relaxed(seed, prefix, phrases, limit, n):
    """Beam search wider than every output: the controls set aside are brute force's; each hypothesis keeps the
    others, and its `unmet` names exactly the phrases it lacks."""
    model = random_model(seed=seed)
    src, mask = one_source(4, 5)
    settings = DecodeConfig(beam_size=256, nbest=4, max_len_a=0, max_len_b=limit, no_repeat_ngram_size=n)
    line = steering(prefix, phrases)
    [hyps], [relaxed] = steered_search(model, src, mask, settings, [line], [7], **IDS)
    assert relaxed == expected_relaxed(prefix, phrases, n, limit), (prefix, phrases, limit, n)
    assert hyps and all(h.score > float("-inf") for h in hyps)
    kept = dict(
        prefix=[] if "prefix" in relaxed else prefix,
        phrases=[] if "constraints" in relaxed else phrases,
        n=0 if "no_repeat_ngram_size" in relaxed else n,
        repeats=0 if "max_ngram_repeats" in relaxed else settings.max_ngram_repeats,
    )
    for h, unmet in zip(hyps, unmet_texts(line, [h.tokens for h in hyps])):
        assert meets(h.tokens, limit=limit, **kept), (h.tokens, relaxed)
        assert unmet == tuple(" ".join(map(str, p)) for p in phrases if not contains(h.tokens, p))


@pytest.mark.parametrize("search", ["greedy", "beam", "sampling"])
def test_a_prefix_that_repeats_itself_relaxes_the_blocking_in_every_search(search, caplog):
    """Prefix 4 4 with no 1-gram twice: every search kept it and found no hypothesis (sampling raised on rows of
    all -inf); now the line is searched again without the blocking, the prefix kept, with a warning naming it, and
    the other line of the batch is searched once, as it was."""
    model = random_model(seed=1)
    src, mask = one_source(4, 5)
    src, mask = src.repeat(2, 1), mask.repeat(2, 1, 1, 1)
    kinds = {"greedy": dict(beam_size=1), "beam": dict(beam_size=4, nbest=2), "sampling": dict(sampling=True)}
    settings = DecodeConfig(max_len_a=0, max_len_b=4, no_repeat_ngram_size=1, **kinds[search])
    lines = [steering([4, 4], []), steering([5], [])]
    with caplog.at_level(logging.WARNING):
        found, relaxed = steered_search(model, src, mask, settings, lines, [3, 4], **IDS)
    assert relaxed == [("no_repeat_ngram_size",), ()]
    assert all(h.tokens[:2] == [4, 4] and h.score > float("-inf") for h in found[0])
    assert all(h.tokens[:1] == [5] and not has_repeat(h.tokens, 1) for h in found[1])
    assert "line 3: no translation met every control" in caplog.text and "repetition blocking" in caplog.text
    assert "line 4" not in caplog.text


def test_a_tight_constraint_blocked_as_a_repeat_is_searched_again_without_the_blocking():
    """Phrase 4 4 in two steps with no 1-gram twice: the search left the line with no hypothesis; now it is searched
    again without the blocking and meets the phrase."""
    model = random_model(seed=0)
    src, mask = one_source(4, 5)
    settings = DecodeConfig(beam_size=4, max_len_a=0, max_len_b=2, no_repeat_ngram_size=1)
    [hyps], [relaxed] = steered_search(model, src, mask, settings, [steering([], [[4, 4]])], [1], **IDS)
    assert relaxed == ("no_repeat_ngram_size",) and [h.tokens for h in hyps] == [[4, 4]]


def test_a_prefix_that_holds_a_run_relaxes_the_run_limit_only():
    """Prefix 4 4 4 under the default limit (no n-gram 3 times in a row): searched again without the limit, the
    prefix kept."""
    model = random_model(seed=1)
    src, mask = one_source(4, 5)
    settings = DecodeConfig(beam_size=4, nbest=2, max_len_a=0, max_len_b=5)
    [hyps], [relaxed] = steered_search(model, src, mask, settings, [steering([4, 4, 4], [])], [2], **IDS)
    assert relaxed == ("max_ngram_repeats",) and all(h.tokens[:3] == [4, 4, 4] for h in hyps)


def test_lines_without_steering_search_once_as_before():
    model = random_model(seed=2)
    src, mask = one_source(4, 5)
    settings = DecodeConfig(beam_size=3, nbest=3, max_len_a=0, max_len_b=4)
    calls = []
    for lines in ([None], [steering([], [])]):
        found, relaxed = steered_search(model, src, mask, settings, lines, [1], **IDS)
        calls.append(([[h.tokens for h in hyps] for hyps in found], relaxed))
    assert calls[0] == calls[1] and calls[0][1] == [()]
    assert list(itertools.chain(*calls[0][0]))
