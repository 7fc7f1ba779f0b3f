"""graph_search.py and model/static_cache.py: the fixed-shape searches give the eager searches' hypotheses
(beam.py's beam search, search.py's greedy decoding) in fp32, with and without the controls that can run in a graph,
on random models and on a model trained on the bundled Bible verses; the capture path reuses one search per shape.

Why scores are compared within a tolerance and tokens exactly: the fixed shapes attend over every cached position
(the unwritten ones hidden by -inf) and keep finished rows, so some kernels see other lengths and row counts than
the eager search's and round differently (by ~1e-7 of a score); the eager search itself rounds differently when a
sentence shares its batch with others (`test_the_eager_search_itself_rounds_by_its_batch`)."""

from __future__ import annotations

import lzma
from pathlib import Path

import pytest
import torch
from conftest import BOS, EOS, PAD, random_tokens, tiny_model

from transformer.decoding import graph_search
from transformer.decoding.beam import beam_search
from transformer.decoding.controls import Controls, NoRepeatNgram, RepeatRunLimit, TargetPrefix
from transformer.decoding.ensemble import Ensemble
from transformer.decoding.graph_search import graphed_search
from transformer.decoding.search import _graphed, greedy_decode
from transformer.model.attention import make_pad_mask
from transformer.model.cache import init_cache
from transformer.model.static_cache import init_static_cache

CONTROLS = {
    "none": lambda: [],
    "repeat-runs": lambda: [RepeatRunLimit(2)],
    "ngrams-and-runs": lambda: [NoRepeatNgram(2), RepeatRunLimit(1)],
}
SCORE_TOLERANCE = 1e-4  # of a hypothesis's score (log P / lp), far below any gap a search decides on


def _batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """7 sources of different lengths (padding, one of 2 tokens), EOS last."""
    src = random_tokens(7, 9, seed=seed)
    for b, length in enumerate((9, 4, 6, 2, 9, 7, 5)):
        src[b, length - 1], src[b, length:] = EOS, PAD
    return src, make_pad_mask(src, PAD)


def _eager(model, src, mask, beam: int, controls, **kw):
    if beam == 1:
        return [[h] for h in greedy_decode(model, src, mask, controls=Controls(controls), **kw)]
    settings = dict(beam_size=beam, alpha=0.6, length_penalty="gnmt", nbest=beam)
    return beam_search(model, src, mask, controls=Controls(controls), **settings, **kw)


def _graphed_run(model, src, mask, beam: int, controls, **kw):
    settings = dict(beam_size=beam, alpha=0.6, length_penalty="gnmt", nbest=beam)
    return graphed_search(model, src, mask, controls=Controls(controls), capture=False, **settings, **kw)


def _assert_same(eager, graphed) -> None:
    assert [[h.tokens for h in hyps] for hyps in graphed] == [[h.tokens for h in hyps] for hyps in eager]
    for ours, theirs in zip(graphed, eager):
        for a, b in zip(ours, theirs):
            assert a.score == pytest.approx(b.score, abs=SCORE_TOLERANCE)
            assert a.log_prob == pytest.approx(b.log_prob, abs=SCORE_TOLERANCE)


def test_a_static_cache_step_gives_the_eager_cache_step():
    model = tiny_model()
    src, mask = _batch(seed=1)
    tokens = random_tokens(7, 10, seed=5)
    with torch.inference_mode():
        memory = model.encode(src, mask)
        eager = init_cache(model, memory, mask, beams=1, capacity=10)
        static = init_static_cache(model, memory, mask, beams=1, capacity=10)
        for t in range(10):
            expected = model.decode_step(tokens[:, t : t + 1], eager)
            assert torch.allclose(model.decode_step(tokens[:, t : t + 1], static), expected, atol=1e-5)
            assert int(static.position) == t + 1


@pytest.mark.parametrize("controls", CONTROLS)
@pytest.mark.parametrize("beam", [1, 4, 8])
@pytest.mark.parametrize("seed", range(4))
def test_the_graphed_search_gives_the_eager_hypotheses(seed, beam, controls):
    model = tiny_model()
    src, mask = _batch(seed)
    kw = dict(bos_id=BOS, eos_id=EOS, max_len_a=1.0, max_len_b=8, min_len=1 + seed % 3)
    eager = _eager(model, src, mask, beam, CONTROLS[controls](), **kw)
    _assert_same(eager, _graphed_run(model, src, mask, beam, CONTROLS[controls](), **kw))


@pytest.mark.parametrize("beam", [1, 4])
def test_sentences_with_room_for_no_piece_and_short_limits(beam):
    """max_len_a 0.5, max_len_b 0: the 2-token source has room for 1 piece, a 1-token source (EOS alone) for none."""
    model = tiny_model()
    src, mask = _batch(seed=3)
    src[3, 0], src[3, 1] = EOS, PAD
    mask = make_pad_mask(src, PAD)
    kw = dict(bos_id=BOS, eos_id=EOS, max_len_a=0.5, max_len_b=0, min_len=0)
    eager = _eager(model, src, mask, beam, [], **kw)
    assert eager[3][0].tokens == []
    _assert_same(eager, _graphed_run(model, src, mask, beam, [], **kw))


def test_the_eager_search_itself_rounds_by_its_batch():
    """Why the scores are compared within a tolerance: a sentence decoded alone and in a batch takes other kernels
    (the Linear layers' for 1 row and for several round differently), and its scores move by rounding alone."""
    model = tiny_model()
    src, mask = _batch(seed=0)
    kw = dict(bos_id=BOS, eos_id=EOS, max_len_a=1.0, max_len_b=8, min_len=1)
    together = _eager(model, src, mask, 4, [], **kw)
    alone = _eager(model, src[:1], mask[:1], 4, [], **kw)
    assert alone[0][0].tokens == together[0][0].tokens
    assert alone[0][0].score == pytest.approx(together[0][0].score, abs=SCORE_TOLERANCE)


def test_the_capture_path_pads_the_batch_and_reuses_its_search(monkeypatch):
    """On the CPU nothing can be captured: `_capture` is replaced by the step it would capture (after the same two
    warm-up steps), so the padding to ROUND's shapes, the keying, the restart between batches and the
    least-recently-used bound run as on a GPU."""
    captured = []

    def capture(search, graphs):
        for _ in range(2):
            search.advance()
        captured.append(search)
        return type("Graph", (), {"replay": staticmethod(search.advance)})()

    monkeypatch.setattr(graph_search, "_capture", capture)
    monkeypatch.setattr(graph_search, "GRAPHS_PER_MODEL", 2)
    model = tiny_model()
    kw = dict(bos_id=BOS, eos_id=EOS, max_len_a=1.0, max_len_b=8, min_len=1)
    for seed in (0, 1, 2):  # the same padded shape: one capture, restarted for each batch
        src, mask = _batch(seed)
        settings = dict(beam_size=4, alpha=0.6, length_penalty="gnmt", nbest=4)
        found = graphed_search(model, src, mask, controls=Controls([RepeatRunLimit(2)]), capture=True, **settings, **kw)
        _assert_same(_eager(model, src, mask, 4, [RepeatRunLimit(2)], **kw), found)
    assert len(captured) == 1
    for beam in (1, 2, 3):  # three more shapes: the bound keeps the last two
        src, mask = _batch(seed=0)
        graphed_search(model, src, mask, beam_size=beam, alpha=0.6, length_penalty="gnmt", nbest=1, capture=True, **kw)
    assert len(captured) == 4 and len(graph_search._GRAPHS[model].entries) == 2
    model.double()  # new weights: a graph captured with the old ones would read freed memory
    src, mask = _batch(seed=0)
    graphed_search(
        model, src, mask.double() > 0, beam_size=3, alpha=0.6, length_penalty="gnmt", nbest=1, capture=True, **kw
    )
    assert len(captured) == 5


class _OnCuda:
    """Stands for a CUDA tensor in `_graphed`'s test (it reads `is_cuda` only)."""

    is_cuda = True


def test_which_searches_take_the_graphed_path():
    from transformer.config import DecodeConfig

    model, decode = tiny_model(), DecodeConfig()
    assert _graphed(model, _OnCuda(), decode, Controls([RepeatRunLimit(2)]))
    assert not _graphed(model, torch.zeros(1), decode, Controls())  # the CPU: eager
    assert not _graphed(model, _OnCuda(), DecodeConfig(cuda_graphs=False), Controls())
    assert not _graphed(Ensemble([model, tiny_model()]), _OnCuda(), decode, Controls())  # brings its own cache
    assert not _graphed(model, _OnCuda(), decode, Controls([TargetPrefix([[5], [6]])]))  # per-row state


@pytest.mark.parametrize(
    "control", [NoRepeatNgram(1), NoRepeatNgram(2), NoRepeatNgram(3), RepeatRunLimit(1), RepeatRunLimit(2)]
)
def test_a_controls_fixed_shape_mask_is_its_mask(control):
    """Brute force over random histories: `mask_static` on the whole buffer at step t is `mask` on t pieces."""
    g = torch.Generator().manual_seed(0)
    for _ in range(60):
        tokens = torch.randint(4, 8, (5, 22), generator=g)
        tokens[:, 0] = BOS
        t = int(torch.randint(0, 21, (1,), generator=g))
        log_probs = torch.randn(5, 9, generator=g)
        expected = control.mask(log_probs.clone(), tokens[:, : t + 1], t)
        assert torch.equal(control.mask_static(log_probs.clone(), tokens, torch.tensor(t)), expected)


# ------------------------------------------------------------------------ a model trained on the test books' language

TEST_BOOKS = Path(__file__).resolve().parent.parent / "data" / "bible-es-en" / "short" / "test.tsv.xz"
TRAIN = TEST_BOOKS.with_name("train.tsv.xz")


def _verses(path: Path, count: int) -> tuple[list[str], list[str]]:
    with lzma.open(path, "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t")[-2:] for _, line in zip(range(count), f)]
    return [r[0] for r in rows], [r[1] for r in rows]


def _padded(rows: list[list[int]]) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), PAD)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


@pytest.fixture(scope="module")
def trained():
    """A 2+2-layer model of width 64 trained for 300 updates on 3,000 short Bible verses (seconds on one thread):
    it translates badly, but it prefers some continuations clearly, as real models do."""
    from transformer.data.tokenizer import Tokenizer
    from transformer.training.loss import label_smoothed_loss

    es, en = _verses(TRAIN, 3000)
    tokenizer = Tokenizer.train(es, en, vocab_size=400)
    V = tokenizer.src_vocab_size
    shape = dict(d_model=64, n_heads=4, d_ff=128, n_encoder_layers=2, n_decoder_layers=2, max_positions=128)
    model = tiny_model(src_vocab_size=V, tgt_vocab_size=V, **shape).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    sources, targets = tokenizer.encode_src(es), tokenizer.encode_tgt(en)
    for update in range(300):
        rows = range(update * 32 % 2976, update * 32 % 2976 + 32)
        x = _padded([sources[i] for i in rows])
        y = _padded([[BOS, *targets[i], EOS] for i in rows])
        loss, _ = label_smoothed_loss(model(x, y[:, :-1]), y[:, 1:], epsilon=0.1, pad_id=PAD)
        optimizer.zero_grad()
        (loss / (y[:, 1:] != PAD).sum()).backward()
        optimizer.step()
    return tokenizer, model.eval()


@pytest.mark.parametrize("beam", [1, 4])
def test_on_the_test_books_the_graphed_search_gives_the_eager_translations(trained, beam):
    tokenizer, model = trained
    es, _ = _verses(TEST_BOOKS, 96)
    kw = dict(bos_id=BOS, eos_id=EOS, max_len_a=1.2, max_len_b=10, min_len=1)
    for start in range(0, 96, 32):
        src = _padded(tokenizer.encode_src(es[start : start + 32]))
        mask = make_pad_mask(src, PAD)
        eager = _eager(model, src, mask, beam, [RepeatRunLimit(2)], **kw)
        _assert_same(eager, _graphed_run(model, src, mask, beam, [RepeatRunLimit(2)], **kw))
