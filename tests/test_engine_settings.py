"""interop/engine_settings.py: which of a checkpoint's decoding settings each exported engine applies, which it will
not, and the settings of ours that compute what the engine computes (tests/test_export.py runs the engines)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from transformer.config import DecodeConfig
from transformer.interop.engine_settings import engine_settings

MAX_POSITIONS = 256


def test_the_defaults_name_what_each_engine_leaves_out():
    """DecodeConfig's defaults (beam 4, GNMT penalty, a * S + b, the run limit 2, capitals folded): generate takes
    the run limit through the shipped processor; CTranslate2 cannot."""
    decode = DecodeConfig()
    hf = engine_settings(decode, "hf", MAX_POSITIONS)
    ct2 = engine_settings(decode, "ctranslate2", MAX_POSITIONS)
    assert list(hf.not_applied) == ["length_penalty", "max_len_a", "fold_capitals"]
    assert list(ct2.not_applied) == ["length_penalty", "max_len_a", "fold_capitals", "max_ngram_repeats"]
    assert hf.processors == {"max_ngram_repeats": 2} and ct2.processors == {}
    assert hf.matched == {"length_penalty": "fairseq", "max_len_a": 0.0, "max_len_b": 255, "fold_capitals": False}
    assert ct2.matched == {**hf.matched, "max_ngram_repeats": 0}
    assert hf.arguments["max_new_tokens"] == ct2.arguments["max_decoding_length"] == 255  # max_positions - 1
    assert hf.arguments["min_new_tokens"] == ct2.arguments["min_decoding_length"] == 1  # never an empty output
    assert hf.arguments["num_beams"] == ct2.arguments["beam_size"] == 4


def test_the_note_is_one_line_naming_each_setting_and_its_value():
    decode = DecodeConfig()
    note = engine_settings(decode, "ctranslate2", MAX_POSITIONS).note(decode)
    assert "\n" not in note and "CTranslate2 will not apply 4 of" in note
    for named in ("length_penalty=gnmt", "max_len_a=1.0", "max_ngram_repeats=2", "fold_capitals=True"):
        assert named in note
    assert "decoding.json" in note
    matched = DecodeConfig(length_penalty="fairseq", max_len_a=0.0, fold_capitals=False)
    assert engine_settings(matched, "hf", MAX_POSITIONS).note(matched) is None  # generate applies every one


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"beam_size": 1},
        {"length_penalty": "none"},
        {"length_penalty": "fairseq", "alpha": 1.0, "nbest": 3},
        {"max_len_a": 0.0, "max_len_b": 400, "min_len": 3},
        {"max_ngram_repeats": 0, "fold_capitals": False, "no_repeat_ngram_size": 3},
        {"sampling": True, "precision": "bf16"},
    ],
)
@pytest.mark.parametrize("engine", ["hf", "ctranslate2"])
def test_the_matched_settings_leave_nothing_out(engine, settings):
    """Ours with `matched` applied is a checkpoint the engine applies whole (CTranslate2's renormalised n-gram
    ban excepted: no setting of ours matches it), so the tests can compare the engines with ours on it."""
    decode = DecodeConfig(**settings)
    first = engine_settings(decode, engine, MAX_POSITIONS)
    assert set(first.matched) <= set(first.not_applied) | {"max_len_b"}
    again = engine_settings(replace(decode, **first.matched), engine, MAX_POSITIONS)
    assert set(again.not_applied) <= {"no_repeat_ngram_size"}
    assert again.arguments == first.arguments  # the engine's settings were already these


def test_lengths_penalties_and_the_run_limit_map_to_the_engines_own_settings():
    decode = DecodeConfig(length_penalty="none", alpha=0.6, max_len_a=0.0, max_len_b=400, min_len=3, nbest=2)
    hf = engine_settings(decode, "hf", MAX_POSITIONS).arguments
    ct2 = engine_settings(decode, "ctranslate2", MAX_POSITIONS).arguments
    assert hf["length_penalty"] == ct2["length_penalty"] == 0.0  # len^0 = 1: no penalty
    assert hf["max_new_tokens"] == ct2["max_decoding_length"] == 255  # 400 capped at max_positions - 1
    assert hf["min_new_tokens"] == ct2["min_decoding_length"] == 3
    assert hf["num_return_sequences"] == ct2["num_hypotheses"] == 2
    greedy = DecodeConfig(beam_size=1, max_ngram_repeats=0)  # no penalty matters, no limit to carry
    assert "length_penalty" not in engine_settings(greedy, "hf", MAX_POSITIONS).not_applied
    assert engine_settings(greedy, "hf", MAX_POSITIONS).processors == {}
    assert "max_ngram_repeats" not in engine_settings(greedy, "ctranslate2", MAX_POSITIONS).not_applied
