"""Config loading: round trip, partial files, overrides, unknown keys, wrong types, bad values."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from transformer.config import Config, ConfigError, from_dict, load_config, parse_duration, save_config

CONFIGS = sorted(Path(__file__).resolve().parents[1].joinpath("configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load(path):
    load_config(path)


def test_base_config_is_the_papers():
    config = load_config(Path(__file__).resolve().parents[1] / "configs/base.yaml")
    m, t, d = config.model, config.train, config.decode
    assert (m.n_encoder_layers, m.n_decoder_layers, m.d_model, m.d_ff, m.n_heads) == (6, 6, 512, 2048, 8)
    assert (m.dropout, t.label_smoothing, t.warmup_steps, t.adam_betas, t.adam_eps) == (
        0.1,
        0.1,
        4000,
        (0.9, 0.98),
        1e-9,
    )
    assert m.share_embeddings and m.tie_output and not m.norm_first
    assert (d.beam_size, d.alpha, d.length_penalty, d.max_len_a, d.max_len_b) == (4, 0.6, "gnmt", 1.0, 50)


def test_round_trip(tmp_path):
    config = load_config(None, ["model.d_model=64", "model.n_heads=4", "train.adam_betas=[0.8, 0.9]"])
    save_config(config, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == config
    assert from_dict(config.to_dict()) == config


def test_partial_file_keeps_defaults(tmp_path):
    (tmp_path / "c.yaml").write_text("model:\n  d_model: 256\n")
    config = load_config(tmp_path / "c.yaml")
    assert config.model.d_model == 256 and config.model.n_heads == 8 and config.train == Config().train


def test_overrides_parse_types(tmp_path):
    config = load_config(
        None,
        [
            "train.lr=5e-4",
            "train.max_time=12m",
            "model.norm_first=true",
            "data.train.tsv=x.tsv",
            "data.train.tsv_columns=[1, 2]",
            "train.max_steps=7",
        ],
    )
    assert config.train.lr == 5e-4 and config.train.max_time == "12m" and config.model.norm_first is True
    assert config.data.train.tsv == "x.tsv" and config.data.train.tsv_columns == (1, 2)
    assert config.train.max_steps == 7


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.d_modle=3", "unknown config key 'model.d_modle' (did you mean 'd_model'?)"),
        ("modle.d_model=3", "unknown config key 'modle'"),
        ("model.d_model=abc", "model.d_model must be an integer, got 'abc'"),
        ("model.d_model=1.5", "model.d_model must be an integer"),
        ("model.dropout=-0.1", "model.dropout must be in [0, 1), got -0.1"),
        ("model.d_model=100", "model.d_model (100) must be divisible by model.n_heads (8)"),
        ("model.activation=tanh", "model.activation must be one of 'relu', 'gelu'"),
        ("model.norm_first=yes please", "model.norm_first must be true or false"),
        ("train.adam_betas=[0.9]", "train.adam_betas must be a list of 2 values"),
        ("train.max_time=soon", "bad duration 'soon'"),
        ("decode.nbest=9", "decode.nbest must be in [1, beam_size]"),
        ("decode.constraint_beam_size=0", "decode.constraint_beam_size must be >= 1, got 0"),
        ("decode.glossary_beam_size=0", "decode.glossary_beam_size must be >= 1, got 0"),
        ("data.train.tsv_columns=[1, 2]", "a data split needs exactly one of src+tgt, tsv, dataset or corpora"),
        ("data.joint_vocab=false", "model.share_embeddings needs data.joint_vocab: true"),
        ("model.d_model", "bad override 'model.d_model': use section.key=value"),
    ],
)
def test_bad_values_are_named(override, message):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ConfigError, match="valid keys: d_model, n_heads, d_ff"):
        load_config(None, ["model.width=3"])


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(tmp_path / "list.yaml")


def test_configs_are_frozen():
    config = Config()
    with pytest.raises(AttributeError):
        config.model.d_model = 3  # type: ignore[misc]
    assert config.replace("model", d_model=64, n_heads=4).model.d_model == 64


@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("12m", 720), ("1.5h", 5400)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


def test_a_weight_outside_corpora_is_refused():
    with pytest.raises(ConfigError, match="data.train.weight: a weight belongs to one corpus"):
        load_config(None, ["data.train={tsv: a.tsv, weight: 2}"])
    config = load_config(None, ["data.train={corpora: [{tsv: a.tsv, weight: 2}, {tsv: b.tsv}]}"])
    assert [c.weight for c in config.data.train.corpora] == [2.0, 1.0]


def test_time_budget_bar_fills_with_seconds():
    from transformer.training.feedback import advance, training_bar

    bar = training_bar(max_steps=0, max_time=60.0, step=0, elapsed=0.0, enabled=True)
    advance(bar, 1, 12.5)
    advance(bar, 2, 30.0)
    assert (bar.total, bar.n, bar.desc) == (60, 30.0, "2 upd")
    advance(bar, 3, 75.0)
    assert bar.n == 60  # never past the budget
    steps = training_bar(max_steps=100, max_time=60.0, step=10, elapsed=0.0, enabled=True)
    advance(steps, 11, 1.0)
    assert (steps.total, steps.n) == (100, 11)


def test_a_config_builds_on_its_base(tmp_path):
    """`base:` reads the other file first (its data paths against its own folder), then this file key by key."""
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared/parent.yaml").write_text(
        "base: tiny\nmodel: {d_model: 48, n_heads: 4}\ndata: {train: {src: a.txt, tgt: b.txt}}\n", encoding="utf-8"
    )
    (tmp_path / "child.yaml").write_text("base: shared/parent.yaml\nmodel: {n_heads: 6}\n", encoding="utf-8")
    config = load_config(tmp_path / "child.yaml", ["model.d_ff=96"])
    tiny = load_config("tiny")
    assert (config.model.d_model, config.model.n_heads, config.model.d_ff) == (48, 6, 96)
    assert config.model.n_encoder_layers == tiny.model.n_encoder_layers and config.train == tiny.train
    assert config.data.train.src == str(tmp_path / "shared/a.txt")


def test_the_wmt14_recipes_build_on_base_and_big():
    big, recipe = load_config("big"), load_config("wmt14_en_de_big")
    assert recipe.model == big.model and recipe.model.d_model == 1024 and recipe.train.max_steps == 300_000
    assert recipe.data.vocab_size == load_config("base").data.vocab_size == 37000
    fr_base, fr_big = load_config("wmt14_en_fr_base"), load_config("wmt14_en_fr_big")
    assert fr_base.model == load_config("base").model and fr_base.train.max_steps == 100_000
    assert fr_big.model == dataclasses.replace(big.model, dropout=0.1)  # section 6.1: 0.1 for EN-FR big, not 0.3
    assert (
        fr_big.train == dataclasses.replace(recipe.train, out_dir="runs/wmt14_en_fr_big")
        and fr_big.train.keep_last == 20
    )
    for config in (fr_base, fr_big):  # section 5.1: 36M pairs, a 32000 word-piece vocabulary, shared
        assert config.data.vocab_size == 32000 and config.data.joint_vocab and config.model.share_embeddings
        assert (config.data.src_lang, config.data.tgt_lang, config.data.train.config) == ("en", "fr", "fr-en")


def test_a_cycle_of_base_files_is_refused(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\n", encoding="utf-8")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="cycle of base files"):
        load_config(tmp_path / "a.yaml")


@pytest.mark.parametrize(
    ("section", "key", "value"), [("train", "onednn_linear", True), ("train", "fast_cpu_dropout", False)]
)
def test_a_removed_key_is_warned_about_and_ignored(section, key, value, tmp_path, caplog):
    """A file, a --set or a checkpoint's stored config that names a key of an earlier version still loads."""
    path = tmp_path / "old.yaml"
    path.write_text(f"{section}:\n  {key}: {value}\n", encoding="utf-8")
    assert load_config(path) == load_config()
    assert f"{section}.{key} is no longer a setting" in caplog.text
    assert load_config(overrides=[f"{section}.{key}={value}"]) == load_config()
    assert from_dict({section: {key: value}}) == load_config()
