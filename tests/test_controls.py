"""Search controls (decoding/controls.py): target prefixes and n-gram blocking against brute force on scripted
models with tiny vocabularies, batched with sentences that have none, through greedy, beam search and sampling."""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import BOS, EOS, PAD, tiny_model
from test_decoding import IDS, beam_search, greedy_decode, one_source, random_model, sample, teacher_forced_log_prob

from transformer.decoding.controls import Controls, NoRepeatNgram, RepeatRunLimit, TargetPrefix
from transformer.decoding.interface import CandidateSelector, DecodingModel, SearchControl
from transformer.decoding.repeat_runs import RepeatRunLogitsProcessor
from transformer.decoding.search import Hypothesis, lp
from transformer.model.attention import make_pad_mask

ALLOWED = [1, 4, 5]  # UNK and two words: PAD and BOS are never generated, EOS ends


def sequences(max_len: int):
    """Every output of at most max_len pieces over ALLOWED: (tokens, ends with EOS)."""
    found = [(list(s), True) for n in range(max_len) for s in itertools.product(ALLOWED, repeat=n)]
    return found + [(list(s), False) for s in itertools.product(ALLOWED, repeat=max_len)]


def brute_force(model, src, keep, max_len: int, n: int = 5, kind: str = "gnmt"):
    """The n best (score, tokens) of the sequences `keep` accepts, scored as beam search scores them."""
    scored = []
    for tokens, eos in sequences(max_len):
        if keep(tokens):
            log_prob = teacher_forced_log_prob(model, src, Hypothesis(tokens, 0.0, 0.0), eos)
            scored.append((log_prob / lp(max(len(tokens) + eos, 1), alpha=0.6, kind=kind), tokens))
    return sorted(scored, reverse=True)[:n]


def test_the_decoding_interface_is_written_as_protocols():
    assert isinstance(tiny_model(), DecodingModel)
    assert isinstance(TargetPrefix([[4]]), SearchControl) and isinstance(NoRepeatNgram(2), SearchControl)
    assert not isinstance(TargetPrefix([[4]]), CandidateSelector)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("prefix", [[4], [5, 1], [4, 4, 5]])
def test_beam_with_a_prefix_is_brute_force_over_the_continuations(seed, prefix):
    """Scores include the prefix's log-probability: they are those of the whole sequences."""
    model = random_model(seed=seed)
    src, mask = one_source(4, 5)
    expected = brute_force(model, src, lambda tokens: tokens[: len(prefix)] == prefix, max_len=4)
    controls = Controls([TargetPrefix([prefix])])
    [hyps] = beam_search(model, src, mask, beam_size=64, max_len_a=0, max_len_b=4, nbest=5, controls=controls, **IDS)
    assert [h.tokens for h in hyps] == [tokens for _, tokens in expected]
    assert [h.score for h in hyps] == pytest.approx([score for score, _ in expected])


def test_a_prefix_equal_to_the_greedy_output_gives_that_output():
    model = tiny_model()
    src = torch.tensor([[5, 9, 7, 11, EOS], [8, 8, 6, EOS, PAD]])
    mask = make_pad_mask(src, PAD)
    plain = greedy_decode(model, src, mask, **IDS)
    steered = greedy_decode(model, src, mask, controls=Controls([TargetPrefix([h.tokens for h in plain])]), **IDS)
    assert [(h.tokens, h.log_prob) for h in steered] == [(h.tokens, pytest.approx(h.log_prob)) for h in plain]


@pytest.mark.parametrize("search", ["greedy", "beam", "sampling"])
def test_prefixes_batched_with_sentences_without_one(search):
    """Every output starts with its prefix; a sentence without one decodes as it does alone, unsteered."""
    model = tiny_model()
    src = torch.tensor([[5, 9, 7, 11, EOS], [8, 8, 6, EOS, PAD], [12, 4, EOS, PAD, PAD]])
    mask = make_pad_mask(src, PAD)
    prefixes = [[7, 7, 9], [], [13]]
    run = {
        "greedy": lambda s, m, c: [[h] for h in greedy_decode(model, s, m, controls=c, **IDS)],
        "beam": lambda s, m, c: beam_search(model, s, m, beam_size=3, nbest=3, controls=c, **IDS),
        "sampling": lambda s, m, c: sample(model, s, m, generator=torch.Generator().manual_seed(0), controls=c, **IDS),
    }[search]
    out = run(src, mask, Controls([TargetPrefix(prefixes)]))
    for hyps, prefix in zip(out, prefixes):
        assert all(h.tokens[: len(prefix)] == prefix for h in hyps)
    if search != "sampling":  # sampling draws from one stream for the whole batch
        alone = run(src[1:2, :4], mask[1:2, ..., :4], None)
        assert [h.tokens for h in out[1]] == [h.tokens for h in alone[0]]


def has_repeat(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("n", [1, 2])
def test_beam_with_ngram_blocking_is_brute_force_over_the_sequences_without_repeats(seed, n):
    model = random_model(seed=seed)
    src, mask = one_source(5, 4)
    expected = brute_force(model, src, lambda tokens: not has_repeat(tokens, n), max_len=4, kind="none")
    controls = Controls([NoRepeatNgram(n)])
    [hyps] = beam_search(
        model,
        src,
        mask,
        beam_size=64,
        max_len_a=0,
        max_len_b=4,
        nbest=5,
        length_penalty="none",
        controls=controls,
        **IDS,
    )
    assert [h.tokens for h in hyps] == [tokens for _, tokens in expected]
    assert [h.score for h in hyps] == pytest.approx([score for score, _ in expected])


@pytest.mark.parametrize("n", [1, 2, 3])
def test_greedy_and_sampling_never_repeat_an_ngram(n):
    """A model that loops on one phrase (the tiny model with a long maximum length) repeats n-grams unblocked."""
    model = tiny_model()
    src = torch.tensor([[5, 9, 7, 11, EOS], [8, 8, 6, EOS, PAD]])
    mask = make_pad_mask(src, PAD)
    long = dict(max_len_a=0, max_len_b=30, **IDS)
    assert any(has_repeat(h.tokens, n) for h in greedy_decode(model, src, mask, **long))
    blocked = greedy_decode(model, src, mask, controls=Controls([NoRepeatNgram(n)]), **long)
    sampled = sample(model, src, mask, num_samples=3, controls=Controls([NoRepeatNgram(n)]), **long)
    assert not any(has_repeat(h.tokens, n) for h in blocked + [h for hyps in sampled for h in hyps])


def ends_in_run(tokens: list[int], copies: int) -> bool:
    """Whether `tokens` end with `copies` equal n-grams in a row, for some n (brute force)."""
    return any(
        all(tokens[len(tokens) - (k + 1) * n : len(tokens) - k * n] == tokens[-n:] for k in range(copies))
        for n in range(1, len(tokens) // copies + 1)
    )


def has_run(tokens: list[int], copies: int) -> bool:
    """Whether some n-gram of `tokens` occurs `copies` times in a row anywhere."""
    return any(ends_in_run(tokens[:end], copies) for end in range(len(tokens) + 1))


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_the_run_limit_forbids_exactly_the_pieces_that_complete_a_run(limit):
    """Random histories over two pieces (runs are common): -inf exactly where brute force says a run would end, in
    the search's control and in the Hugging Face logits processor that the export ships (called as `generate` calls
    it: the decoder start token first, its scores left as they were)."""
    generator = torch.Generator().manual_seed(limit)
    for t in range(14):
        history = torch.randint(4, 6, (64, t), generator=generator)  # (N, t) pieces 4 and 5
        tokens = torch.cat([torch.full((64, 1), BOS), history], dim=1)  # (N, t+1)
        scores = torch.zeros(64, 7)  # (N, V)
        processed = RepeatRunLogitsProcessor(limit)(tokens, scores)  # (N, V)
        masked = RepeatRunLimit(limit).mask(torch.zeros(64, 7), tokens, t)  # (N, V)
        assert torch.equal(processed, masked) and not scores.any()
        for row, out in zip(history.tolist(), masked):
            expected = [x for x in range(7) if ends_in_run(row + [x], limit + 1)]
            assert torch.isinf(out).nonzero().flatten().tolist() == expected, (row, limit)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("limit", [1, 2])
def test_beam_with_the_run_limit_is_brute_force_over_the_sequences_without_runs(seed, limit):
    model = random_model(seed=seed)
    src, mask = one_source(5, 4)
    expected = brute_force(model, src, lambda tokens: not has_run(tokens, limit + 1), max_len=4, kind="none")
    controls = Controls([RepeatRunLimit(limit)])
    settings = dict(beam_size=64, max_len_a=0, max_len_b=4, nbest=5, length_penalty="none", controls=controls)
    [hyps] = beam_search(model, src, mask, **settings, **IDS)
    assert [h.tokens for h in hyps] == [tokens for _, tokens in expected]
    assert [h.score for h in hyps] == pytest.approx([score for score, _ in expected])


def test_greedy_and_sampling_never_loop_under_the_run_limit():
    """The tiny model loops with a long maximum length; under the limit no n-gram comes 3 times in a row."""
    model = tiny_model()
    src = torch.tensor([[5, 9, 7, 11, EOS], [8, 8, 6, EOS, PAD]])
    mask = make_pad_mask(src, PAD)
    long = dict(max_len_a=0, max_len_b=30, **IDS)
    assert any(has_run(h.tokens, 3) for h in greedy_decode(model, src, mask, **long))
    limited = greedy_decode(model, src, mask, controls=Controls([RepeatRunLimit(2)]), **long)
    sampled = sample(model, src, mask, num_samples=3, controls=Controls([RepeatRunLimit(2)]), **long)
    assert not any(has_run(h.tokens, 3) for h in limited + [h for hyps in sampled for h in hyps])


def test_controls_refuse_two_selectors():
    class Selecting:
        def select(self, log_probs, scores, k):
            raise AssertionError

    with pytest.raises(ValueError, match="at most one"):
        Controls([Selecting(), Selecting()])
