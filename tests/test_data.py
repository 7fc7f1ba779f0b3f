"""data.py: encoding and filtering into the cache, the cache keys, transformer-prepare; config-relative paths."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from test_corpus import BIBLE, LANGS, PAIRS, _error, _write, hf_cache, make_source  # noqa: F401 (hf_cache: autouse)

from transformer.commands.cli import prepare_main
from transformer.config import from_dict, load_config
from transformer.data import prepare as data_module
from transformer.data.corpus import read_lines
from transformer.data.encoding import Workers, encode_chunks
from transformer.data.prepare import EncodedSplit, load_pairs, prepare_data
from transformer.data.tokenizer import EOS_ID, Tokenizer
from transformer.errors import UserError

# ---------------------------------------------------------------------------------------------- prepare_data


def bible_config(folder: Path, **data) -> dict:
    """A config dict on a 300-pair slice of the bundled corpus plus three pairs the filter must drop."""
    rows = [line.split("\t") for line in read_lines(BIBLE / "train.tsv.xz", limit=300)]
    rows += [["empty", "", "nothing here"], ["long", "muy " * 600, "very " * 600], ["ratio", "Sí.", "Yes " * 40]]
    _write(folder / "train.tsv", "\n".join("\t".join(r) for r in rows) + "\n")
    valid = read_lines(BIBLE / "dev.tsv.xz", limit=40)
    _write(folder / "valid.tsv", "\n".join(valid) + "\n")
    split = lambda name: {"tsv": str(folder / f"{name}.tsv"), "tsv_columns": [1, 2]}
    settings = dict(src_lang="es", tgt_lang="en", vocab_size=200, max_tokens_per_sentence=500, max_length_ratio=3.0)
    return {
        "data": {**settings, "train": split("train"), "valid": split("valid"), "cache_dir": str(folder / "c")} | data
    }


@pytest.fixture
def config_dict(tmp_path) -> dict:
    return bible_config(tmp_path)


def test_prepare_data_encodes_and_filters(config_dict):
    prepared = prepare_data(from_dict(config_dict), progress=False)
    train, valid = prepared.splits["train"], prepared.splits["valid"]
    assert set(prepared.splits) == {"train", "valid"}  # test is not configured
    assert train.dropped == {"empty": 1, "too_long": 1, "length_ratio": 1} and len(train) == 300
    assert train.src_text is None and len(valid) == len(valid.src_text) == 40
    assert isinstance(train.src_tokens, np.memmap) and train.src_tokens.dtype == np.int32
    assert train.src_lengths.max() <= 500 and train.tgt_lengths.max() <= 500
    for split in (train, valid):
        assert all(split.src(i)[-1] == EOS_ID for i in range(len(split)))
        assert [len(split.src(i)) for i in range(len(split))] == split.src_lengths.tolist()
        assert [len(split.tgt(i)) + 1 for i in range(len(split))] == split.tgt_lengths.tolist()
    tokenizer = prepared.tokenizer
    assert tokenizer.decode_tgt([valid.tgt(i).tolist() for i in range(40)]) == valid.tgt_text
    assert tokenizer.encode_src(valid.src_text[:5]) == [valid.src(i).tolist() for i in range(5)]


def test_second_prepare_reuses_the_cache(config_dict, monkeypatch):
    first = prepare_data(from_dict(config_dict), progress=False)

    def fail(*args, **kwargs):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(data_module, "encode_chunks", fail)
    monkeypatch.setattr(data_module, "stream_pairs", fail)
    monkeypatch.setattr(Tokenizer, "train", fail)
    second = prepare_data(from_dict(config_dict), progress=False)
    assert second.tokenizer.to_bytes() == first.tokenizer.to_bytes() and second.cache_paths == first.cache_paths
    for name in ("train", "valid"):
        a, b = first.splits[name], second.splits[name]
        assert np.array_equal(a.src_tokens, b.src_tokens) and np.array_equal(a.tgt_offsets, b.tgt_offsets)
        assert a.tgt_text == b.tgt_text and a.dropped == b.dropped


def test_cache_keys_follow_the_settings_and_files(config_dict, tmp_path):
    first = prepare_data(from_dict(config_dict), progress=False).cache_paths
    config_dict["data"]["max_length_ratio"] = 0.0  # changes the train encoding only
    second = prepare_data(from_dict(config_dict), progress=False)
    assert second.splits["train"].dropped["length_ratio"] == 0
    assert second.cache_paths["train"] != first["train"]
    assert second.cache_paths["valid"] == first["valid"] and second.cache_paths["tokenizer"] == first["tokenizer"]
    valid = tmp_path / "valid.tsv"
    os.utime(valid, ns=(valid.stat().st_atime_ns, valid.stat().st_mtime_ns + 10**9))  # an edited file
    assert prepare_data(from_dict(config_dict), progress=False).cache_paths["valid"] != first["valid"]
    config_dict["data"]["vocab_size"] = 150  # a new vocabulary re-encodes everything
    third = prepare_data(from_dict(config_dict), progress=False)
    assert third.tokenizer.src_vocab_size == 150 and third.cache_paths["tokenizer"] != first["tokenizer"]


def test_prepare_with_a_given_tokenizer_needs_no_training_split(config_dict):
    tokenizer = prepare_data(from_dict(config_dict), progress=False).tokenizer
    del config_dict["data"]["train"]
    config_dict["data"]["test"] = config_dict["data"].pop("valid")
    with pytest.raises(UserError, match="data.train is not configured"):
        prepare_data(from_dict(config_dict), progress=False)
    prepared = prepare_data(from_dict(config_dict), splits=("test",), progress=False, tokenizer=tokenizer)
    assert list(prepared.splits) == ["test"] and len(prepared.splits["test"]) == 40


def test_encoded_split_from_lists_and_select():
    split = EncodedSplit.from_lists([[5, 6, EOS_ID], [7, EOS_ID], [8, 9, 10, EOS_ID]], [[4], [4, 5, 6], []])
    assert split.src_lengths.tolist() == [3, 2, 4] and split.tgt_lengths.tolist() == [2, 4, 1]
    kept = split.select(np.array([True, False, True]))
    assert [kept.src(i).tolist() for i in range(2)] == [[5, 6, EOS_ID], [8, 9, 10, EOS_ID]]
    assert [kept.tgt(i).tolist() for i in range(2)] == [[4], []]


def test_parallel_encoding_equals_serial():
    src = [f"hola mundo número {i}" for i in range(20_000)]
    tgt = [f"hello world number {i}" for i in range(20_000)]
    tokenizer = Tokenizer.train(src[:300], tgt[:300], vocab_size=60)
    chunks = lambda: ((src[i : i + 3000], tgt[i : i + 3000]) for i in range(0, 20_000, 3000))  # 7 chunks
    serial = list(encode_chunks(chunks(), tokenizer, workers=Workers(1), clean=(True, True)))
    with Workers(2) as workers:
        parallel = list(encode_chunks(chunks(), tokenizer, workers=workers, clean=(True, True)))
    last = tokenizer.encode_src([src[-1]])[0]
    assert serial[-1][1][0][-len(last) :].tolist() == last  # the last chunk's source tokens end with the last pair's
    assert len(serial) == len(parallel) == 7
    for (pair_a, arrays_a), (pair_b, arrays_b) in zip(serial, parallel):
        assert pair_a == pair_b and all(np.array_equal(a, b) for a, b in zip(arrays_a, arrays_b))


# ---------------------------------------------------------------------------------------------- the command


def test_prepare_command(config_dict, tmp_path, capsys):
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config_dict))  # JSON is YAML
    assert prepare_main(["--config", str(path), "--set", "data.vocab_size=120"]) == 0
    out = capsys.readouterr().out
    assert "vocabulary: 120 joint" in out and "train: 300 pairs" in out and "1 (length_ratio)" in out
    assert "train: <unk> would meet 0.000% of source characters (0.00% of sentences)" in out  # coverage 1.0
    folders = sorted(p.name.split("-")[0] for p in (tmp_path / "c").iterdir())
    assert folders == ["tokenizer", "train", "valid"]


@pytest.mark.parametrize(
    "override, expected",
    [
        ("data.train.tsv=missing.tsv", "data file not found: missing.tsv"),
        ("data.vocab_size=50000", "could not train a 50000-piece"),
        ("data.max_tokens_per_sentence=2", "no training pairs left after filtering"),
    ],
)
def test_prepare_command_errors_exit_2(override, expected, config_dict, tmp_path, capsys):
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config_dict))
    assert prepare_main(["--config", str(path), "--set", override]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and expected in err[-1]


# ---------------------------------------------------------------------------------------------- config paths


def test_config_paths_resolve_against_the_config_folder(tmp_path, monkeypatch):
    make_source("tsv", tmp_path, *PAIRS)
    (tmp_path / "configs").mkdir(), (tmp_path / "elsewhere").mkdir()
    config_file = _write(tmp_path / "configs" / "c.yaml", "data: {train: {tsv: ../a.tsv, tsv_columns: [1, 2]}}\n")
    monkeypatch.chdir(tmp_path / "elsewhere")
    config = load_config(config_file)
    assert config.data.train.tsv == str(tmp_path / "a.tsv") and config.data.cache_dir == "cache"
    assert load_pairs(config.data.train, LANGS)[1] == PAIRS[1]
    override = load_config(config_file, ["data.train.tsv=a.tsv"])  # --set: the current directory
    assert override.data.train.tsv == "a.tsv"
    assert f"resolves against the current directory {tmp_path / 'elsewhere'}" in _error(override.data.train)
    missing = load_config(_write(tmp_path / "configs" / "m.yaml", "data: {train: {tsv: nope.tsv}}\n"))
    message = _error(missing.data.train)
    assert str(tmp_path / "configs" / "nope.tsv") in message
    assert f"against its folder: {tmp_path / 'configs'} (of" in message


def test_shipped_configs_by_name():
    from transformer.paths import shipped_configs_dir

    config = load_config("tiny")
    assert Path(config.data.train.tsv) == shipped_configs_dir().parent / "data/bible-es-en/dev.tsv.xz"
    assert Path(config.data.train.tsv).is_file()
    with pytest.raises(UserError, match="shipped configs by name: ") as error:
        load_config("nonexistent")
    listed = str(error.value).split("shipped configs by name: ")[1].split(", ")
    assert listed == sorted(p.stem for p in shipped_configs_dir().glob("*.yaml"))
    assert {"base", "big", "demo", "demo_small", "tiny"} <= set(listed)


@pytest.mark.parametrize("path", sorted(Path(__file__).parent.parent.glob("configs/*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_config_loads_and_its_local_files_exist(path):
    """Each config in configs/ loads, and every plain-file split it names (resolved against configs/) exists."""
    config = load_config(path)
    for name in ("train", "valid", "test"):
        split = getattr(config.data, name)
        for file in (split.tsv, split.src, split.tgt) if split is not None else ():
            assert file is None or Path(file).is_file(), f"{path.name}: data.{name} names a missing file {file}"
