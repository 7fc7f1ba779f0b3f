"""Search on a real (tiny) model and on batches: beam 1 equals greedy, scores equal teacher-forced rescoring, a
padded batch equals one sentence at a time, done sentences and finished rows leave the batch (the last sentences
taking their places), sampling and its filters, and the chunked top-2K search equals topk over every candidate."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import EOS, PAD, random_tokens, tiny_model
from test_decoding import (
    B_,
    IDS,
    A,
    C,
    beam_search,
    greedy_decode,
    one_source,
    random_model,
    sample,
    teacher_forced_log_prob,
)

from transformer.config import DecodeConfig
from transformer.decoding import beam, candidates
from transformer.decoding.candidates import top_candidates, top_candidates_and_best
from transformer.decoding.search import filter_logits, generate, lp, max_output_lengths
from transformer.model.attention import make_pad_mask

# ------------------------------------------------------------------------------------ a real (tiny) model


def eos_prone_model():
    """The tiny model with a larger EOS embedding (tied output), so that some hypotheses end before max length."""
    model = tiny_model()
    with torch.no_grad():
        model.decoder.embedding.weight[EOS] *= 4
    return model


def padded_batch():
    src = random_tokens(3, 7, seed=3)
    src[:, -1] = EOS
    src[1, 4] = EOS
    src[1, 5:] = PAD
    src[2, 2] = EOS
    src[2, 3:] = PAD
    return src, make_pad_mask(src, PAD)


def test_beam_one_equals_greedy():
    model, (src, mask) = eos_prone_model(), padded_batch()
    greedy = greedy_decode(model, src, mask, max_len_b=8, **IDS)
    beam = beam_search(model, src, mask, beam_size=1, length_penalty="none", max_len_b=8, **IDS)
    assert [[h.tokens for h in hyps] for hyps in beam] == [[h.tokens] for h in greedy]
    assert [hyps[0].log_prob for hyps in beam] == pytest.approx([h.log_prob for h in greedy], abs=1e-5)


@pytest.mark.parametrize("kind", ["gnmt", "fairseq"])
def test_scores_equal_teacher_forced_rescoring(kind):
    """Catches cache-reorder bugs: every hypothesis's log-probability, recomputed without the cache."""
    model, (src, mask) = eos_prone_model(), padded_batch()
    results = beam_search(
        model, src, mask, beam_size=4, length_penalty=kind, max_len_a=0.5, max_len_b=4, nbest=4, **IDS
    )
    max_lens = max_output_lengths(model, mask, 0.5, 4).tolist()
    ended = set()
    for b, hyps in enumerate(results):
        assert len(hyps) == 4 and hyps == sorted(hyps, key=lambda h: -h.score)
        row = src[b : b + 1, : int(mask[b].sum())]
        for hyp in hyps:
            eos = len(hyp.tokens) < max_lens[b]  # shorter than the limit: it ended with EOS
            ended.add(eos)
            assert hyp.log_prob == pytest.approx(teacher_forced_log_prob(model, row, hyp, eos), abs=1e-4)
            penalty = lp(len(hyp.tokens) + eos, alpha=0.6, kind=kind)
            assert hyp.score == pytest.approx(hyp.log_prob / penalty)
    assert ended == {True, False}, "the test should see both finished and truncated hypotheses"


@pytest.mark.parametrize("beam_size", [1, 3])
def test_padded_batch_equals_one_sentence_at_a_time(beam_size):
    model, (src, mask) = eos_prone_model(), padded_batch()
    config = DecodeConfig(beam_size=beam_size, nbest=beam_size, max_len_b=6)
    together = generate(model, src, mask, config, **IDS)
    for b in range(3):
        row = src[b : b + 1, : int(mask[b].sum())]
        [alone] = generate(model, row, make_pad_mask(row, PAD), config, **IDS)
        assert [h.tokens for h in alone] == [h.tokens for h in together[b]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in together[b]], abs=1e-5)


def test_done_sentences_leave_the_batch():
    """Sources of 2, 4 and 6 tokens, max length = S: the first step runs one row per sentence, then K; the first
    sentence leaves after 2 steps, the others by 6; each result as alone."""
    model, K = random_model(seed=5), 3
    sources = [[A, EOS], [B_, A, C, EOS], [C, C, A, B_, A, EOS]]
    src = torch.tensor([s + [PAD] * (6 - len(s)) for s in sources])
    rows, decode_step = [], model.decode_step
    model.decode_step = lambda tokens, cache: rows.append(tokens.size(0)) or decode_step(tokens, cache)
    config = DecodeConfig(beam_size=K, nbest=K, max_len_a=1.0, max_len_b=0)
    together = generate(model, src, make_pad_mask(src, PAD), config, **IDS)
    assert rows[:2] == [3, 3 * K] and rows[2] <= 2 * K and rows[1:] == sorted(rows[1:], reverse=True)
    assert len(rows) <= 6
    for source, hyps in zip(sources, together):
        [alone] = generate(model, *one_source(*source[:-1]), config, **IDS)
        assert [(h.tokens, h.score) for h in alone] == [(h.tokens, h.score) for h in hyps]


# ------------------------------------------------------------------------------------------------ sampling


def test_filter_logits():
    log_probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    kept = lambda **kw: filter_logits(log_probs, **{"temperature": 1.0, "top_k": 0, "top_p": 1.0, **kw}).isfinite()
    assert kept(top_k=2).tolist() == [[True, True, False, False]]
    assert kept(top_p=0.8).tolist() == [[True, True, False, False]]
    assert kept(top_p=0.81).tolist() == [[True, True, True, False]]
    assert kept(top_p=1e-6).tolist() == [[True, False, False, False]]
    scaled = filter_logits(log_probs, temperature=2.0, top_k=0, top_p=1.0).softmax(-1)
    torch.testing.assert_close(scaled, (log_probs / 2).softmax(-1))


def test_sampling_is_seeded_and_top_k_one_is_greedy():
    model, (src, mask) = eos_prone_model(), padded_batch()
    greedy = greedy_decode(model, src, mask, max_len_b=6, **IDS)
    top1 = sample(model, src, mask, top_k=1, num_samples=2, max_len_b=6, **IDS)
    assert [[h.tokens for h in hyps] for hyps in top1] == [[h.tokens] * 2 for h in greedy]
    draw = lambda seed: sample(
        model,
        src,
        mask,
        temperature=1.5,
        num_samples=3,
        max_len_b=6,
        generator=torch.Generator().manual_seed(seed),
        **IDS,
    )
    first = draw(7)
    assert first == draw(7)
    for b, hyps in enumerate(first):
        row = src[b : b + 1, : int(mask[b].sum())]
        for hyp in hyps:  # log_prob is under the model's own (temperature 1) distribution
            eos = len(hyp.tokens) < max_output_lengths(model, make_pad_mask(row, PAD), 1.0, 6).item()
            assert hyp.log_prob == pytest.approx(teacher_forced_log_prob(model, row, hyp, eos), abs=1e-4)


def test_greedy_finished_rows_leave_the_batch():
    """Max length = S (2, 4, 6 tokens): rows leave as they finish, and each result equals its sentence alone."""
    model = random_model(seed=5)
    sources = [[A, EOS], [B_, A, C, EOS], [C, C, A, B_, A, EOS]]
    src = torch.tensor([s + [PAD] * (6 - len(s)) for s in sources])
    rows, decode_step = [], model.decode_step
    model.decode_step = lambda tokens, cache: rows.append(tokens.size(0)) or decode_step(tokens, cache)
    together = greedy_decode(model, src, make_pad_mask(src, PAD), max_len_a=1.0, max_len_b=0, **IDS)
    assert rows[0] == 3 and rows == sorted(rows, reverse=True) and rows[-1] == 1 and len(rows) <= 6
    for source, hyp in zip(sources, together):
        [alone] = greedy_decode(model, *one_source(*source[:-1]), max_len_a=1.0, max_len_b=0, **IDS)
        assert (alone.tokens, alone.score) == (hyp.tokens, hyp.score)


@pytest.mark.parametrize("V, chunk", [(4000, 160), (1000, 200), (23, 0)])  # 0: no chunks, every candidate read
def test_top_candidates_equal_topk_over_every_candidate(V, chunk):  # noqa: N803
    """The chunked search returns exactly topk over all K*V sums scores[b, beam] + log_probs[b, beam, word]: the
    same values, rows and words (random floats: no ties), with -inf entries (banned tokens, a whole chunk)."""
    assert candidates._chunk_size(V) == chunk
    g = torch.Generator().manual_seed(V)
    B, K, k = 5, 4, 8
    log_probs = torch.randn(B, K, V, generator=g).log_softmax(-1)
    log_probs[:, :, :2] = -math.inf  # PAD and BOS
    log_probs[0, 1, 80:240] = -math.inf
    scores = torch.randn(B, K, generator=g) * 3
    values, where = top_candidates(log_probs, scores, k)
    expected, index = (log_probs + scores[:, :, None]).view(B, K * V).topk(k, dim=1)
    rows = torch.arange(B)[:, None] * K + index // V  # (B, k) rows of log_probs viewed as (B*K, V)
    assert torch.equal(values, expected) and torch.equal(where, rows * V + index % V)


@pytest.mark.parametrize("V", [4000, 23])  # chunked (160 a chunk) and not
def test_the_best_pieces_are_argmax_with_its_ties(V):  # noqa: N803
    """`top_candidates_and_best` gives top_candidates' values and places and, for each hypothesis, argmax over V:
    the first of equal maxima, whether they share a chunk or not, for a row of -inf and for scores that would make
    two chunk maxima equal once added (0.1 + 1e8 == 0.2 + 1e8 in float32)."""
    g = torch.Generator().manual_seed(V)
    B, K, k = 3, 4, 8
    log_probs = torch.randn(B, K, V, generator=g).log_softmax(-1)
    log_probs[0, 0, [5, V - 3]] = 0.0  # equal maxima in two chunks: the first wins
    log_probs[0, 1, [V - 4, V - 3]] = 0.0  # equal maxima in one chunk
    log_probs[1, 0] = -math.inf  # a row its controls left no piece: argmax says 0
    log_probs[2, 0, :] = -50.0
    log_probs[2, 0, [3, V - 1]] = torch.tensor([0.1, 0.2])  # the later is the larger, equal after + 1e8
    scores = torch.randn(B, K, generator=g)
    scores[2, 0] = 1e8
    values, where, best = top_candidates_and_best(log_probs, scores, k)
    expected_values, expected_where = top_candidates(log_probs, scores, k)
    assert torch.equal(values, expected_values) and torch.equal(where, expected_where)
    assert torch.equal(best, log_probs.argmax(dim=2))
    assert best[0, 0] == 5 and best[0, 1] == V - 4 and best[1, 0] == 0 and best[2, 0] == V - 1


@pytest.mark.parametrize(
    "done, kept",
    [({1, 2}, [0, 5, 4, 3]), ({4, 5}, [0, 1, 2, 3]), ({0, 5}, [4, 1, 2, 3]), ({0, 1, 2, 3, 4, 5}, [])],
)
def test_done_sentences_places_are_taken_by_the_last_ones(done, kept):
    """Dropping done sentences moves only the last sentences that stay into the places before them, so the cache
    copies those alone; every state tensor follows the same order."""
    B, K = 6, 2
    state = beam._BeamState(
        tokens=torch.arange(B * K)[:, None],
        scores=torch.arange(B * K, dtype=torch.float).view(B, K),
        max_lens=list(range(10, 10 + B)),
        sentence=list(range(B)),
        finished=[[] for _ in range(B)],
        done=set(done),
        score_fn=lambda log_prob, length: log_prob,
    )
    sentences, rows = beam._drop_done(state, torch.arange(B * K) + 100)
    keep_rows = [b * K + k for b in kept for k in range(K)]
    assert sentences.tolist() == kept and rows.tolist() == [100 + r for r in keep_rows]
    assert state.tokens[:, 0].tolist() == keep_rows and state.scores.flatten().tolist() == keep_rows
    assert state.max_lens == [10 + b for b in kept] and state.sentence == kept and state.done == set()
