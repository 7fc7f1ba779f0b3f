"""Scoring given translations (decoding/scoring.py): a greedy hypothesis scores the log-probability the search took
for it, the token-weighted mean NLL is the validation NLL of the same pairs and batches, order survives batching,
and empty and over-long lines give what the module docstring says."""

from __future__ import annotations

import copy
import logging
import math

import numpy as np
import pytest
import tiny_checkpoint
import torch
from conftest import BOS, EOS, PAD, random_tokens, tiny_model

from transformer.checkpoint import load_for_inference
from transformer.data.batching import TokenBatchSampler, collate
from transformer.data.prepare import EncodedSplit
from transformer.decoding.ensemble import Ensemble
from transformer.decoding.scoring import Score, score_ids, score_texts, totals
from transformer.decoding.search import greedy_decode
from transformer.errors import UserError
from transformer.model.attention import make_pad_mask
from transformer.training.validation import evaluate_loss

CPU = dict(device=torch.device("cpu"), precision="fp32")


def _sources(n: int, seed: int) -> list[list[int]]:
    """n sources of 2..9 pieces, each ending in EOS."""
    lengths = np.random.default_rng(seed).integers(2, 10, n).tolist()
    rows = random_tokens(n, 9, seed=seed).tolist()
    return [row[:k] + [EOS] for row, k in zip(rows, lengths)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained a little (its greedy outputs end with EOS), its tokenizer, and a perturbed copy."""
    path = tiny_checkpoint.build_trained(
        tmp_path_factory.mktemp("trained"), norm_first=False, activation="relu", steps=80
    )
    model, tokenizer, _ = load_for_inference(path)
    other, generator = copy.deepcopy(model), torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    return model, other, tokenizer


@pytest.mark.parametrize("ensemble", [False, True])
def test_a_greedy_hypothesis_scores_the_log_probability_the_search_took(trained, ensemble):
    """Each finished greedy hypothesis (EOS taken, before its length limit): its score under teacher forcing equals
    `Hypothesis.log_prob`, the sum of the log-probabilities greedy search took step by step with the cache."""
    model, other, tokenizer = trained
    model = Ensemble([model, other]) if ensemble else model
    sources = tokenizer.encode_src(tiny_checkpoint.sentences(16, seed=11))
    src = torch.full((16, max(map(len, sources))), PAD)
    for b, ids in enumerate(sources):
        src[b, : len(ids)] = torch.tensor(ids)
    hyps = greedy_decode(
        model, src, make_pad_mask(src, PAD), bos_id=BOS, eos_id=EOS, max_len_a=0, max_len_b=12, min_len=0
    )
    finished = [b for b, h in enumerate(hyps) if len(h.tokens) < 12]
    assert len(finished) >= 12
    scores = score_ids(model, [sources[b] for b in finished], [hyps[b].tokens for b in finished], max_tokens=40, **CPU)
    assert [s.log_prob for s in scores] == pytest.approx([hyps[b].log_prob for b in finished], abs=1e-5)
    assert [s.tokens for s in scores] == [len(hyps[b].tokens) + 1 for b in finished]  # the pieces and EOS


def test_the_mean_nll_is_the_validation_nll_of_the_same_batches():
    """validation.evaluate_loss on the same pairs and token batches returns the NLL per target token (label
    smoothing only changes its other figure): the token-weighted mean of the scores must equal it."""
    model = tiny_model()
    sources, targets = _sources(30, seed=1), [row[:-1] for row in _sources(30, seed=2)]
    scores = score_ids(model, sources, targets, max_tokens=60, **CPU)
    split = EncodedSplit.from_lists(sources, targets)
    sampler = TokenBatchSampler(split.src_lengths, split.tgt_lengths, max_tokens=60, seed=0, shuffle=False)
    batches = [collate(split, indices) for indices in sampler]
    _, nll = evaluate_loss(model, batches, precision="fp32", pad_id=PAD, epsilon=0.1)
    model.eval()
    assert len(batches) > 3 and totals(scores)["nll"] == pytest.approx(nll, rel=1e-5)
    assert totals(scores)["tokens"] == sum(len(t) + 1 for t in targets)


def test_order_is_the_input_order_whatever_the_batches():
    model = tiny_model()
    sources, targets = _sources(20, seed=5), [row[:-1] for row in _sources(20, seed=6)]
    one_batch = score_ids(model, sources, targets, max_tokens=10_000, **CPU)
    many = score_ids(model, sources, targets, max_tokens=20, **CPU)  # sorted by length into many small batches
    alone = [score_ids(model, [s], [t], max_tokens=20, **CPU)[0] for s, t in zip(sources, targets)]
    for got in (many, alone):
        assert [s.log_prob for s in got] == pytest.approx([s.log_prob for s in one_batch], abs=1e-5)
    assert [s.tokens for s in many] == [len(t) + 1 for t in targets]


def test_totals_by_hand():
    scores = [Score(-2.0, 2), Score(0.0, 0), Score(-4.0, 2)]  # the middle one not scored (an empty source)
    total = totals(scores)
    assert total == dict(sentences=3, scored=2, tokens=4, log_prob=-6.0, nll=1.5, ppl=pytest.approx(math.exp(1.5)))
    assert (scores[0].per_token, scores[0].ppl) == (-1.0, pytest.approx(math.e))
    assert math.isnan(scores[1].per_token) and math.isnan(scores[1].ppl)
    assert math.isnan(totals([Score(0.0, 0)])["nll"])


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    paths = tiny_checkpoint.build(tmp_path_factory.mktemp("scoring"))
    model, tokenizer, _ = load_for_inference(paths["checkpoint"])
    return model, tokenizer


def test_empty_sides(loaded):
    """An empty source is not scored; an empty target scores its EOS: log p(EOS | BOS, source), from `decode`."""
    model, tokenizer = loaded
    scores = score_texts(
        model, tokenizer, ["the cat", "  ", "", "a dog"], ["", "the cat", "", "a dog"], max_tokens=100, **CPU
    )
    assert [s.tokens for s in scores] == [1, 0, 0, len(tokenizer.encode_tgt(["a dog"])[0]) + 1]
    assert scores[1] == scores[2] == Score(0.0, 0)
    src = torch.tensor(tokenizer.encode_src(["the cat"]))
    mask = make_pad_mask(src, PAD)
    with torch.no_grad():
        expected = model.decode(torch.tensor([[BOS]]), model.encode(src, mask), mask).log_softmax(-1)[0, 0, EOS]
    assert scores[0].log_prob == pytest.approx(expected.item(), abs=1e-6)


def test_over_long_lines_are_truncated_with_a_warning(loaded, caplog):
    model, tokenizer = loaded
    long = " ".join(["cat dog house"] * 20)  # far more than the model's 24 positions
    with caplog.at_level(logging.WARNING):
        scores = score_texts(model, tokenizer, ["the cat", long], [long, "the cat"], max_tokens=100, **CPU)
    assert scores[0].tokens == model.max_positions  # pieces cut to max_positions - 1, then EOS
    assert "line 1: " in caplog.text and "target tokens, truncated to 24" in caplog.text
    assert "line 2: " in caplog.text and "source tokens, truncated to 24" in caplog.text
    with pytest.raises(UserError, match="2 sources but 1 targets"):
        score_texts(model, tokenizer, ["a", "b"], ["a"], max_tokens=100, **CPU)
