"""The Python API (`transformer.Translator`): checkpoint in, strings or scored n-best lists out.

The reference is the search itself (`decoding.beam_search` on the same model), which the decoding tests check
against brute force; here we check the wiring: settings, order, n-best, scores, errors, int8.
"""

from __future__ import annotations

import pytest
import tiny_checkpoint
import torch

from transformer import Translator, UserError
from transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer.decoding.search import beam_search
from transformer.model.attention import make_pad_mask


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return tiny_checkpoint.build(tmp_path_factory.mktemp("api"))


def test_translate_returns_strings_in_order(paths):
    lines = paths["src"].read_text(encoding="utf-8").splitlines()[:5]
    t = Translator.from_checkpoint(paths["checkpoint"], device="cpu", beam_size=3)
    out = t.translate(lines)
    assert isinstance(out, list) and all(isinstance(s, str) for s in out) and len(out) == 5
    assert t.translate(lines[2]) == [out[2]]  # a single string is one sentence
    assert [t.translate([line])[0] for line in lines] == out  # batching does not change results
    assert t.translate([""]) == [""]


def test_nbest_are_the_beams_hypotheses_with_scores(paths):
    line = paths["src"].read_text(encoding="utf-8").splitlines()[0]
    t = Translator.from_checkpoint(paths["checkpoint"], device="cpu", beam_size=4, alpha=0.6, max_ngram_repeats=0)
    (hyps,) = t.translate([line], nbest=4)
    assert 1 <= len(hyps) <= 4 and hyps[0].text == t.translate([line])[0]
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    src = torch.tensor([t.tokenizer.encode_src([line])[0]])
    settings = dict(beam_size=4, alpha=0.6, length_penalty="gnmt", max_len_a=0.0, max_len_b=6, min_len=1, nbest=4)
    expected = beam_search(t.model, src, make_pad_mask(src, PAD_ID), bos_id=BOS_ID, eos_id=EOS_ID, **settings)[0]
    assert [h.tokens for h in hyps] == [h.tokens for h in expected]
    assert [h.score for h in hyps] == pytest.approx([h.score for h in expected])


def test_bad_settings_are_user_errors(paths):
    with pytest.raises(UserError, match="beem_size"):
        Translator.from_checkpoint(paths["checkpoint"], beem_size=4)
    t = Translator.from_checkpoint(paths["checkpoint"], beam_size=2)
    with pytest.raises(UserError, match="nbest 3"):
        t.translate(["the cat"], nbest=3)


def test_int8_quantizes_the_linear_layers(paths):
    t = Translator.from_checkpoint(paths["checkpoint"], device="cpu", int8=True)
    kinds = {type(m).__name__ for m in t.model.modules()}
    assert "Linear" in kinds and not any(type(m) is torch.nn.Linear for m in t.model.modules())
    out = t.translate(["the cat sat", "a dog"])
    assert len(out) == 2 and all(isinstance(s, str) for s in out)


def test_with_decode_equals_loading_with_those_settings_and_shares_the_model(paths):
    lines = paths["src"].read_text(encoding="utf-8").splitlines()[:6]
    base = Translator.from_checkpoint(paths["checkpoint"], device="cpu")
    base.translate(lines[:1])
    other = base.with_decode(beam_size=3, alpha=1.0, max_len_b=4)
    loaded = Translator.from_checkpoint(paths["checkpoint"], device="cpu", beam_size=3, alpha=1.0, max_len_b=4)
    assert other.translate(lines, nbest=2) == loaded.translate(lines, nbest=2)
    assert other._engine(2).model is base._engine(1).model  # one packed CPU copy, not one per settings
    assert base.config.decode.beam_size == 2 and other.config.decode.beam_size == 3  # the base is unchanged
    with pytest.raises(UserError, match="beem_size"):
        base.with_decode(beem_size=3)
    with pytest.raises(UserError, match="beam_size"):
        base.with_decode(beam_size=0)
