"""The phrase automaton (decoding/phrases.py), the one definition of a constraint phrase met: its moves against the
plain fall-back loop they list, what it meets against a substring check, and the feasibility walk over a prefix
against the search itself."""

from __future__ import annotations

import random

import pytest
from conftest import EOS
from test_decoding import IDS, beam_search, one_source, random_model

from transformer.decoding.constraints import LexicalConstraints
from transformer.decoding.controls import Controls, TargetPrefix
from transformer.decoding.phrases import START, ConstraintState, Phrases


def plain_advance(phrases: Phrases, state: ConstraintState, token: int) -> ConstraintState:
    """The automaton written as a loop (as it was before its moves were listed): the phrase in progress goes on;
    else the longest end of (its matched pieces, `token`) that begins an unmet phrase, phrases in order."""
    met, phrase, matched = state
    if phrase >= 0 and phrases.phrases[phrase][matched] == token:
        return phrases._matched(met, phrase, matched + 1)
    tail = (phrases.phrases[phrase][:matched] if phrase >= 0 else ()) + (token,)
    for start in range(len(tail)):
        end = tail[start:]
        for i, pieces in enumerate(phrases.phrases):
            if not met >> i & 1 and pieces[: len(end)] == end:
                return phrases._matched(met, i, len(end))
    return ConstraintState(met, -1, 0)


def overlapping_phrases(rng: random.Random, pieces=(4, 5, 6)) -> list[list[int]]:
    """One to three phrases of one to four pieces over three pieces: shared pieces, repeats, one inside another."""
    return [[rng.choice(pieces) for _ in range(rng.randint(1, 4))] for _ in range(rng.randint(1, 3))]


def contains(tokens, phrase) -> bool:
    return any(list(tokens[i : i + len(phrase)]) == list(phrase) for i in range(len(tokens) - len(phrase) + 1))


@pytest.mark.parametrize("seed", range(40))
def test_the_listed_moves_are_the_plain_fall_back_loop(seed):
    """Every state reached on random histories over {4, 5, 6, 7} (7 in no phrase) advances alike both ways."""
    rng = random.Random(seed)
    phrases = Phrases(overlapping_phrases(rng))
    for _ in range(20):
        state = START
        for _ in range(12):
            token = rng.choice([4, 5, 6, 7])
            expected = plain_advance(phrases, state, token)
            assert phrases.advance(state, token) == expected, (phrases.phrases, state, token)
            state = expected


def test_overlapping_phrases_count_once():
    """ "a b c" meets "a b" only: "b c" needs pieces of its own; "a b c b c" meets both."""
    phrases = Phrases([[4, 5], [5, 6]])
    assert phrases.unmet([4, 5, 6]) == [1] and phrases.unmet([4, 5, 6, 5, 6]) == []
    assert phrases.needed([4, 5, 6]) == 5 and not phrases.fits([4, 5, 6], 4) and phrases.fits([4, 5, 6], 5)


@pytest.mark.parametrize("seed", range(20))
def test_phrases_without_a_shared_piece_are_met_exactly_when_the_output_contains_them(seed):
    rng = random.Random(seed)
    pieces = rng.sample([4, 5, 6, 7, 8], 5)
    given = [pieces[:2], pieces[2:3], pieces[3:]][: rng.randint(1, 3)]
    phrases = Phrases(given)
    for _ in range(30):
        tokens = [rng.choice(pieces + [1]) for _ in range(rng.randint(0, 10))]
        assert phrases.unmet(tokens) == [i for i, p in enumerate(given) if not contains(tokens, p)], (given, tokens)


def feasibility_cases():
    """(seed, prefix, phrases, limit) over {1, 4, 5}: phrases that overlap each other, half of them taken from the
    prefix (where a substring check and the automaton disagree), limits around what they need."""
    rng = random.Random(1)
    yield 0, [4, 5, 1], [[4, 5], [5, 1]], 4  # the prefix holds both, but "5 1" shares its "5" with "4 5"
    for seed in range(1, 80):
        prefix = [rng.choice([1, 4, 5]) for _ in range(rng.randint(0, 4))]
        phrases = overlapping_phrases(rng, (1, 4, 5))
        for i, phrase in enumerate(phrases):
            start = rng.randint(0, len(prefix))
            phrases[i] = prefix[start : start + len(phrase)] if rng.random() < 0.5 and start < len(prefix) else phrase
        yield seed, prefix, phrases, max(1, len(prefix) + rng.randint(-1, 3))


@pytest.mark.parametrize("seed, prefix, phrases, limit", list(feasibility_cases()))
def test_the_feasibility_walk_agrees_with_the_search(seed, prefix, phrases, limit):
    """Where `fits` says yes, the search (a beam wider than every candidate) ends with hypotheses that start with
    the prefix and meet every phrase; where it says no, the search has no hypothesis: the check and the search
    read the same automaton under the same budget."""
    model = random_model(seed=seed)
    src, mask = one_source(4, 5)
    constraints = LexicalConstraints([phrases], eos_id=EOS, limits=[limit])
    controls = Controls([TargetPrefix([prefix]), constraints])
    settings = dict(beam_size=64, max_len_a=0, max_len_b=limit, nbest=64)
    [hyps] = beam_search(model, src, mask, controls=controls, **settings, **IDS)
    automaton = Phrases(phrases)
    assert bool(hyps) == automaton.fits(prefix, limit), (prefix, phrases, limit)
    for h in hyps:
        assert h.tokens[: len(prefix)] == prefix[:limit] and automaton.unmet(h.tokens) == []


def test_a_prefix_that_breaks_a_phrase_at_a_tight_step_does_not_fit():
    """Phrase "4 5 1" and prefix "4 1": after "4" the three pieces need all three steps left, and "1" breaks the
    phrase; the same with a step more fits."""
    phrases = Phrases([[4, 5, 1]])
    assert not phrases.fits([4, 1], 3) and phrases.fits([4, 1], 5)
    assert phrases.fits([4], 3) and not phrases.fits([5], 3)  # "5" cannot start it with every step needed
