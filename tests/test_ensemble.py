"""Ensembles (decoding/ensemble.py): the mean of probabilities, an ensemble of one model or of copies of one decodes
exactly as the model, beam search over two different models finds the brute-force best under the averaged
probabilities, the CPU's packed copy reaches every model, and checkpoints with other tokenizers are refused."""

from __future__ import annotations

import itertools
import math

import pytest
import tiny_checkpoint
import torch
from conftest import BOS, EOS, PAD, random_tokens, tiny_model

from transformer import Translator
from transformer.data.tokenizer import Tokenizer
from transformer.decoding import cpu_linear, streaming
from transformer.decoding.cpu_linear import PackedLinear
from transformer.decoding.ensemble import Ensemble, load_models, mean_log_probs
from transformer.decoding.search import beam_search, greedy_decode
from transformer.decoding.streaming import StreamingEngine as Engine
from transformer.errors import UserError
from transformer.model.attention import make_pad_mask

LENGTHS = dict(bos_id=BOS, eos_id=EOS, max_len_a=1.0, max_len_b=4, min_len=0)
BEAM = dict(beam_size=3, alpha=0.6, length_penalty="gnmt", nbest=3)


def test_mean_log_probs_is_the_log_of_the_mean_probability():
    p, q = torch.tensor([0.2, 0.5, 0.0]), torch.tensor([0.6, 0.5, 0.0])
    got = mean_log_probs([p.log(), q.log()])
    assert got[:2].tolist() == pytest.approx([math.log(0.4), math.log(0.5)])  # (0.2 + 0.6) / 2, (0.5 + 0.5) / 2
    assert got[2].item() == -math.inf  # zero in both models stays zero, not NaN
    assert mean_log_probs([p.log(), torch.tensor([0.0, 0.5, 0.2]).log()])[0].item() == pytest.approx(math.log(0.1))
    x = torch.randn(5, 7).log_softmax(-1)
    assert torch.equal(mean_log_probs([x, x, x]), x)  # copies give back exactly the input
    assert mean_log_probs([x]) is x


def _batch():
    src = random_tokens(4, 7, seed=3)
    src[:, -1] = EOS
    src[1, 3], src[1, 4:] = EOS, PAD
    src[3, 2], src[3, 3:] = EOS, PAD
    return src, make_pad_mask(src, PAD)


def _eos_prone(**overrides):
    model = tiny_model(**overrides)
    with torch.no_grad():
        model.decoder.embedding.weight[EOS] *= 4  # tied output: some hypotheses end before the length limit
    return model


@pytest.mark.parametrize("copies", [1, 2])
def test_an_ensemble_of_one_model_or_of_copies_decodes_exactly_as_the_model(copies):
    model, (src, mask) = _eos_prone(), _batch()
    ensemble = Ensemble([model] * copies)
    assert (ensemble.max_positions, ensemble.pad_id) == (model.max_positions, model.pad_id)
    greedy = greedy_decode(model, src, mask, **LENGTHS)
    assert greedy_decode(ensemble, src, mask, **LENGTHS) == greedy  # tokens, scores and log-probs, bit for bit
    beam = beam_search(model, src, mask, **LENGTHS, **BEAM)
    assert beam_search(ensemble, src, mask, **LENGTHS, **BEAM) == beam
    assert any(len(h.tokens) < 4 for hyps in beam for h in hyps)  # finished hypotheses were compared too


def _ensemble_log_prob(models, src, tokens: list[int], eos: bool) -> float:
    """log P(tokens [+ EOS]) under the mean of the models' probabilities, token by token, from full forward passes."""
    target = tokens + [EOS] * eos
    tgt_in = torch.tensor([[BOS] + target[:-1]] if target else [[BOS]])
    mask = make_pad_mask(src, PAD)
    with torch.no_grad():
        probs = [m.decode(tgt_in, m.encode(src, mask), mask).softmax(-1)[0] for m in models]  # (T, V) each
    mean = sum(probs) / len(models)
    return sum(math.log(mean[i, t].item()) for i, t in enumerate(target))


def test_beam_over_two_different_models_is_the_brute_force_best():
    """Vocabulary of 6 (UNK and EOS, pieces 4 and 5; PAD and BOS never generated), at most 3 tokens: all 40
    sequences scored under the averaged probabilities with the GNMT penalty; the models differ in weights and size."""
    models = [
        _eos_prone(src_vocab_size=6, tgt_vocab_size=6),
        _eos_prone(src_vocab_size=6, tgt_vocab_size=6, n_decoder_layers=2, d_ff=20),
    ]
    src = torch.tensor([[4, 5, 4, EOS]])
    sequences = [(list(s), True) for n in range(3) for s in itertools.product([1, 4, 5], repeat=n)]
    sequences += [(list(s), False) for s in itertools.product([1, 4, 5], repeat=3)]
    expected = sorted(
        ((_ensemble_log_prob(models, src, t, e) / ((5 + max(len(t) + e, 1)) / 6) ** 0.6, t) for t, e in sequences),
        reverse=True,
    )
    lengths = LENGTHS | dict(max_len_a=0.0, max_len_b=3)
    [hyps] = beam_search(Ensemble(models), src, make_pad_mask(src, PAD), **lengths, **(BEAM | dict(beam_size=64)))
    assert [h.tokens for h in hyps] == [t for _, t in expected[:3]]
    assert [h.score for h in hyps] == pytest.approx([s for s, _ in expected[:3]], abs=1e-5)
    single = beam_search(models[0], src, make_pad_mask(src, PAD), **lengths, **(BEAM | dict(beam_size=64)))[0]
    assert [h.score for h in single] != pytest.approx([h.score for h in hyps])  # the second model counts


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    paths = tiny_checkpoint.build(tmp_path_factory.mktemp("ensemble"))
    paths["sibling"] = tiny_checkpoint.build_sibling(paths["checkpoint"], tmp_path_factory.mktemp("sib"), seed=7)
    return paths


@pytest.mark.skipif(not cpu_linear.available(), reason="this PyTorch build has no oneDNN ops")
def test_the_cpu_copy_packs_every_model_and_decodes_the_same(checkpoints, monkeypatch):
    lines = checkpoints["src"].read_text(encoding="utf-8").splitlines()[:8]
    model, tokenizer, config = load_models([checkpoints["checkpoint"], checkpoints["sibling"]])
    packed = Engine(model, tokenizer, config.decode)  # CPU, fp32: the Linear layers packed
    assert isinstance(packed.model, Ensemble) and len(packed.model.models) == 2
    assert not any(type(m) is torch.nn.Linear for m in packed.model.modules())
    assert [sum(type(m) is PackedLinear for m in one.modules()) > 0 for one in packed.model.models] == [True, True]
    monkeypatch.setattr(streaming, "pack_linears", lambda model: model)
    plain = Engine(model, tokenizer, config.decode)
    assert any(type(m) is torch.nn.Linear for m in plain.model.modules())
    expected = [r[0] for r in plain.translate(lines)]
    got = [r[0] for r in packed.translate(lines)]
    assert [r.tokens for r in got] == [r.tokens for r in expected]
    assert [r.score for r in got] == pytest.approx([r.score for r in expected], abs=1e-5)
    alone = Engine(load_models([checkpoints["checkpoint"]])[0], tokenizer, config.decode).translate_texts(lines)
    assert alone != [r.text for r in got]  # the sibling changes some translations: both models take part


def test_the_api_ensemble_of_copies_translates_and_scores_as_one_checkpoint(checkpoints):
    lines = checkpoints["src"].read_text(encoding="utf-8").splitlines()[:6]
    refs = checkpoints["ref"].read_text(encoding="utf-8").splitlines()[:6]
    one = Translator.from_checkpoint(checkpoints["checkpoint"], beam_size=3)
    two = Translator.from_checkpoint([checkpoints["checkpoint"]] * 2, beam_size=3)
    assert isinstance(two.model, Ensemble)
    assert two.translate(lines, nbest=3) == one.translate(lines, nbest=3)
    assert [s.log_prob for s in two.score(lines, refs)] == pytest.approx([s.log_prob for s in one.score(lines, refs)])


def _with_tokenizer(checkpoint, folder, tokenizer) -> str:
    state = torch.load(checkpoint, weights_only=True)
    state["tokenizer"] = tokenizer.to_bytes()
    state["vocab"] = {"src": tokenizer.src_vocab_size, "tgt": tokenizer.tgt_vocab_size}
    torch.save(state, folder / "other.pt")
    return str(folder / "other.pt")


@pytest.mark.parametrize(
    "sentences, vocab_size, message",
    [
        (tiny_checkpoint.sentences(40, seed=9), 40, "different vocabularies"),  # another size
        ([s.upper() for s in tiny_checkpoint.sentences(40, seed=1)], 48, "different SentencePiece models"),
    ],  # same size
)
def test_checkpoints_with_another_tokenizer_are_refused_naming_both(
    checkpoints, tmp_path, sentences, vocab_size, message
):
    tokenizer = Tokenizer.train(sentences, sentences, vocab_size=vocab_size)
    other = _with_tokenizer(checkpoints["checkpoint"], tmp_path, tokenizer)
    with pytest.raises(UserError, match=message) as info:
        load_models([checkpoints["checkpoint"], other])
    assert str(checkpoints["checkpoint"]) in str(info.value) and other in str(info.value)
    assert "\n" not in str(info.value)
