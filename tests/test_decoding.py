"""Search against hand-computed results on a scripted model, brute force, greedy, and teacher-forced rescoring."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, replace

import pytest
import torch
from conftest import BOS, EOS, PAD, tiny_model

from transformer.config import DecodeConfig, choices
from transformer.decoding import search as decoding
from transformer.decoding.search import LENGTH_PENALTIES, Hypothesis, generate, lp, max_output_lengths
from transformer.model.attention import make_pad_mask

A, B_, C = 4, 5, 6  # scripted tokens (B_ so as not to shadow the batch size)
IDS = dict(bos_id=BOS, eos_id=EOS)
D = DecodeConfig()  # the settings a test leaves out take DecodeConfig's defaults, as `generate` passes them
LENGTHS = dict(max_len_a=D.max_len_a, max_len_b=D.max_len_b, min_len=D.min_len)


def greedy_decode(model, src, mask, **settings):
    return decoding.greedy_decode(model, src, mask, **(LENGTHS | settings))


def beam_search(model, src, mask, **settings):
    beam = dict(beam_size=D.beam_size, alpha=D.alpha, length_penalty=D.length_penalty, nbest=D.nbest)
    return decoding.beam_search(model, src, mask, **(LENGTHS | beam | settings))


def sample(model, src, mask, **settings):
    sampling = dict(temperature=D.temperature, top_k=D.top_k, top_p=D.top_p, num_samples=1)
    return decoding.sample(model, src, mask, **(LENGTHS | sampling | settings))


@dataclass
class ScriptedCache:
    sources: list[tuple[int, ...]]  # per sentence
    prefixes: list[tuple[int, ...]]  # output tokens so far per row, BOS first; a sentence's `beams` rows in a run
    beams: int

    def keep_sentences(self, sentences: torch.Tensor, rows: torch.Tensor | None = None) -> None:
        if rows is None:
            rows = torch.tensor([b * self.beams + k for b in sentences.tolist() for k in range(self.beams)])
        self.sources = [self.sources[i] for i in sentences.tolist()]
        self.rerank_beams(rows)

    def rerank_beams(self, index: torch.Tensor) -> None:  # like DecoderCache: the sources stay put, so a row
        self.prefixes = [self.prefixes[i] for i in index.tolist()]  # moved to another sentence shows
        self.beams = len(self.prefixes) // max(len(self.sources), 1)

    def row_sources(self) -> list[tuple[int, ...]]:
        return [source for source in self.sources for _ in range(self.beams)]


class ScriptedModel:
    """The decoding interface with next-token probabilities `dist(source, prefix) -> list of V floats`."""

    pad_id = PAD

    def __init__(self, dist, vocab_size: int, max_positions: int = 64) -> None:
        self.dist, self.vocab_size, self.max_positions = dist, vocab_size, max_positions

    def _log_probs(self, source, prefix) -> list[float]:
        probs = self.dist(source, prefix)
        return [math.log(p) if p > 0 else -math.inf for p in probs]

    def encode(self, src, src_mask):
        return src  # the "memory" is the source itself

    def init_cache(self, memory, src_mask, *, beams: int, capacity: int) -> ScriptedCache:
        sources = [tuple(row[mask].tolist()) for row, mask in zip(memory, src_mask.flatten(1))]
        return ScriptedCache(sources, [() for _ in range(len(sources) * beams)], beams)

    def decode_step(self, tokens, cache: ScriptedCache) -> torch.Tensor:
        cache.prefixes = [p + (t,) for p, t in zip(cache.prefixes, tokens[:, 0].tolist())]
        return torch.tensor([self._log_probs(s, p[1:]) for s, p in zip(cache.row_sources(), cache.prefixes)])

    def decode(self, tgt_in, memory, src_mask) -> torch.Tensor:
        cache = self.init_cache(memory, src_mask, beams=1, capacity=0)
        sources = cache.sources
        rows = [
            [self._log_probs(s, tuple(t[1 : i + 1])) for i in range(len(t))] for s, t in zip(sources, tgt_in.tolist())
        ]
        return torch.tensor(rows)  # (B, T, V) log-probabilities, which are valid logits


def table_model(table: dict, default: dict, vocab_size: int = 8) -> ScriptedModel:
    """Probabilities per prefix from `table` ({prefix: {token: p}}), `default` for any other prefix."""

    def dist(source, prefix):
        probs = [0.0] * vocab_size
        for token, p in table.get(prefix, default).items():
            probs[token] = p
        return probs

    return ScriptedModel(dist, vocab_size)


def random_model(vocab_size: int = 6, seed: int = 0) -> ScriptedModel:
    """Random distributions, a fixed function of (source, prefix)."""

    def dist(source, prefix):
        rng = random.Random(hash((seed, source, prefix)))
        weights = [rng.random() ** 3 for _ in range(vocab_size)]
        return [w / sum(weights) for w in weights]

    return ScriptedModel(dist, vocab_size)


def one_source(*ids):
    src = torch.tensor([list(ids) + [EOS]])
    return src, make_pad_mask(src, PAD)


def teacher_forced_log_prob(model, src, hyp: Hypothesis, eos: bool) -> float:
    """Sum of log P(token | prefix) from the full (non-incremental) forward pass."""
    target = hyp.tokens + ([EOS] if eos else [])
    tgt_in = torch.tensor([[BOS] + target[:-1]]) if target else torch.tensor([[BOS]])
    src_mask = make_pad_mask(src, PAD)
    with torch.no_grad():
        logits = model.decode(tgt_in, model.encode(src, src_mask), src_mask).float()
    log_probs = logits.log_softmax(-1)[0]
    return sum(log_probs[i, t].item() for i, t in enumerate(target))


# ------------------------------------------------------------------------------------------- scripted models


def test_greedy_worked_example():
    """Greedy by hand: vocab [the, cat, sat, on, END]; each step's most probable token (0.8, 0.7, 0.85, 0.85, 0.95)
    gives 'the cat sat on' then END."""
    THE, CAT, SAT, ON = 4, 5, 6, 7
    steps = [
        [0.8, 0.05, 0.05, 0.05, 0.05],
        [0.1, 0.7, 0.1, 0.05, 0.05],
        [0.05, 0.05, 0.85, 0.03, 0.02],
        [0.02, 0.03, 0.1, 0.85, 0.01],
        [0.01, 0.01, 0.01, 0.02, 0.95],
    ]
    order = [THE, CAT, SAT, ON, EOS]

    def dist(source, prefix):
        probs = [0.0] * 8
        for token, p in zip(order, steps[len(prefix)]):
            probs[token] = p
        return probs

    src, mask = one_source(9)
    [hyp] = greedy_decode(ScriptedModel(dist, 8), src, mask, **IDS)
    assert hyp.tokens == [THE, CAT, SAT, ON]
    assert hyp.log_prob == pytest.approx(sum(map(math.log, [0.8, 0.7, 0.85, 0.85, 0.95])))
    assert hyp.score == hyp.log_prob


# greedy picks A then EOS (P .2); beam 2 finds B EOS (P .36)
GARDEN = table_model(
    {(): {A: 0.5, B_: 0.4, EOS: 0.1}, (A,): {EOS: 0.4, A: 0.3, B_: 0.3}, (B_,): {EOS: 0.9, A: 0.05, B_: 0.05}},
    default={EOS: 1.0},
)
# stopping now (P .3) against one more token (P .7 * .4 = .28); after A A: EOS .8
SHORT_LONG = table_model({(): {EOS: 0.3, A: 0.7}, (A,): {EOS: 0.4, A: 0.6}}, default={EOS: 0.8, A: 0.2})


def test_beam_finds_what_greedy_misses():
    src, mask = one_source(9)
    assert greedy_decode(GARDEN, src, mask, **IDS)[0].tokens == [A]
    [hyps] = beam_search(GARDEN, src, mask, beam_size=2, length_penalty="none", nbest=2, **IDS)
    assert [h.tokens for h in hyps] == [[B_], [A]]
    assert [h.log_prob for h in hyps] == pytest.approx([math.log(0.4 * 0.9), math.log(0.5 * 0.4)])


@pytest.mark.parametrize(
    "kind, alpha, best",
    [("none", 0.6, []), ("gnmt", 0.6, [A]), ("fairseq", 0.6, [A]), ("gnmt", 0.0, [])],
)
def test_length_penalty_decides(kind, alpha, best):
    """log .3 = -1.204 for [] (length 1 with EOS) against log .28 = -1.273 for [A] (length 2)."""
    src, mask = one_source(9)
    [hyps] = beam_search(SHORT_LONG, src, mask, beam_size=2, alpha=alpha, length_penalty=kind, nbest=2, **IDS)
    expected = {(): math.log(0.3) / lp(1, alpha=alpha, kind=kind), (A,): math.log(0.28) / lp(2, alpha=alpha, kind=kind)}
    assert hyps[0].tokens == best
    assert {tuple(h.tokens): h.score for h in hyps} == pytest.approx(expected)


def test_length_penalty_values():
    assert lp(3, alpha=0.6, kind="gnmt") == pytest.approx((8 / 6) ** 0.6)
    assert lp(3, alpha=0.6, kind="fairseq") == pytest.approx(3**0.6)
    assert lp(3, alpha=0.6, kind="none") == 1.0
    assert tuple(LENGTH_PENALTIES) == choices(DecodeConfig, "length_penalty"), "a formula for every config value"
    with pytest.raises(ValueError, match="unknown length penalty 'gnmtt'"):
        lp(3, alpha=0.6, kind="gnmtt")
    torch.testing.assert_close(lp(torch.tensor([1, 7]), alpha=1.0, kind="gnmt"), torch.tensor([1.0, 2.0]))


def test_min_length_forbids_early_eos():
    src, mask = one_source(9)
    [hyps] = beam_search(SHORT_LONG, src, mask, beam_size=2, length_penalty="none", min_len=1, nbest=2, **IDS)
    assert [h.tokens for h in hyps] == [[A, A], [A]]
    assert [h.log_prob for h in hyps] == pytest.approx([math.log(0.7 * 0.6 * 0.8), math.log(0.7 * 0.4)])
    [greedy] = greedy_decode(GARDEN, src, mask, min_len=2, **IDS)
    assert greedy.tokens == [A, A]  # EOS (.4) forbidden at the second step; A and B tie at .3, argmax takes A


def test_max_length_truncates():
    """a * S + b with a = 0, b = 1: one output token; the alive hypothesis is finalised without EOS."""
    src, mask = one_source(9)
    [hyps] = beam_search(
        SHORT_LONG, src, mask, beam_size=2, length_penalty="none", max_len_a=0, max_len_b=1, nbest=2, **IDS
    )
    assert [(h.tokens, h.log_prob) for h in hyps] == [
        ([A], pytest.approx(math.log(0.7))),
        ([], pytest.approx(math.log(0.3))),
    ]
    [greedy] = greedy_decode(SHORT_LONG, src, mask, max_len_a=0, max_len_b=1, **IDS)
    assert (greedy.tokens, greedy.log_prob) == ([A], pytest.approx(math.log(0.7)))
    [empty] = beam_search(SHORT_LONG, src, mask, max_len_a=0, max_len_b=0, **IDS)
    assert (empty[0].tokens, empty[0].score) == ([], 0.0)


def test_max_length_from_real_source_length_and_capped():
    src = torch.tensor([[5, 6, 7, EOS], [5, EOS, PAD, PAD]])
    model = ScriptedModel(None, 8, max_positions=60)
    assert max_output_lengths(model, make_pad_mask(src, PAD), 1.0, 50).tolist() == [54, 52]
    assert max_output_lengths(model, make_pad_mask(src, PAD), 2.0, 53).tolist() == [59, 57]
    assert max_output_lengths(model, make_pad_mask(src, PAD), 1.2, 0).tolist() == [4, 2]


@pytest.mark.parametrize("seed", range(3))
def test_beam_with_large_k_is_brute_force_best(seed):
    """Vocabulary {UNK, EOS, 4, 5} (PAD and BOS are never generated), at most 3 tokens: 40 sequences."""
    model = random_model(seed=seed)
    src, mask = one_source(4, 5)
    allowed = [1, 4, 5]
    sequences = [(list(s), True) for n in range(3) for s in itertools.product(allowed, repeat=n)]
    sequences += [(list(s), False) for s in itertools.product(allowed, repeat=3)]
    for kind in ("gnmt", "none"):
        expected = []
        for tokens, eos in sequences:
            log_prob = teacher_forced_log_prob(model, src, Hypothesis(tokens, 0.0, 0.0), eos)
            expected.append((log_prob / lp(max(len(tokens) + eos, 1), alpha=0.6, kind=kind), tokens))
        expected.sort(reverse=True)
        [hyps] = beam_search(
            model, src, mask, beam_size=64, length_penalty=kind, max_len_a=0, max_len_b=3, nbest=5, **IDS
        )
        assert [h.tokens for h in hyps] == [tokens for _, tokens in expected[:5]]
        assert [h.score for h in hyps] == pytest.approx([score for score, _ in expected[:5]])


def test_beam_with_large_k_on_a_real_model_is_brute_force_best():
    model = tiny_model(src_vocab_size=6, tgt_vocab_size=6)
    src, mask = one_source(4, 5, 4)
    sequences = [(list(s), True) for n in range(3) for s in itertools.product([1, 4, 5], repeat=n)]
    best = max(
        (teacher_forced_log_prob(model, src, Hypothesis(t, 0, 0), e) / ((5 + len(t) + e) / 6) ** 0.6, t)
        for t, e in sequences + [(list(s), False) for s in itertools.product([1, 4, 5], repeat=3)]
    )
    [[hyp]] = beam_search(model, src, mask, beam_size=64, max_len_a=0, max_len_b=3, **IDS)
    assert (hyp.score, hyp.tokens) == (pytest.approx(best[0], abs=1e-5), best[1])


# EOS first (P .6), else A then EOS: what the demo model does on most single words
SILENT = table_model({(): {EOS: 0.6, A: 0.4}}, default={EOS: 0.9, A: 0.1})


@pytest.mark.parametrize("decode", [DecodeConfig(beam_size=1), DecodeConfig(beam_size=4), DecodeConfig(sampling=True)])
def test_generate_never_gives_an_empty_translation(decode):
    """The searches themselves can end at once (min_len 0, as asked); `generate` forbids EOS first whatever min_len."""
    src, mask = one_source(9)
    assert greedy_decode(SILENT, src, mask, **IDS)[0].tokens == []
    assert beam_search(SILENT, src, mask, length_penalty="none", **IDS)[0][0].tokens == []
    [[hyp]] = generate(SILENT, src, mask, replace(decode, min_len=0), **IDS, generator=torch.Generator().manual_seed(0))
    assert hyp.tokens == [A] and hyp.log_prob == pytest.approx(math.log(0.4 * 0.9))


def test_generate_dispatches_on_the_config():
    src, mask = one_source(9)
    assert generate(GARDEN, src, mask, DecodeConfig(beam_size=1), **IDS)[0][0].tokens == [A]
    assert generate(GARDEN, src, mask, DecodeConfig(beam_size=2), **IDS)[0][0].tokens == [B_]
    sampled = generate(GARDEN, src, mask, DecodeConfig(sampling=True, top_k=1, nbest=2), **IDS)
    assert [h.tokens for h in sampled[0]] == [[A], [A]]
