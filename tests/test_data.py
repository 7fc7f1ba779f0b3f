"""Corpora and prepared data: every source kind, the error messages, filtering, the cache, transformer-prepare."""

from __future__ import annotations

import gzip
import json
import lzma
import os
from pathlib import Path

import numpy as np
import pytest

from transformer import data as data_module
from transformer.cli import prepare_main
from transformer.config import ConfigError, DataConfig, SplitConfig, from_dict, load_config
from transformer.corpus import read_lines
from transformer.data import EncodedSplit, load_pairs, prepare_data
from transformer.errors import UserError
from transformer.tokenizer import EOS_ID, Tokenizer

ROOT = Path(__file__).resolve().parents[1]
BIBLE = ROOT / "data" / "bible-es-en"
LANGS = DataConfig(src_lang="es", tgt_lang="en")
PAIRS = (
    ["Hola mundo.", "¿Dónde está la biblioteca?", "Él fué á la ciudad", "  espacios  ", "x"],
    ["Hello world.", "Where is the library?", "He went to the city", "spaces", "y z"],
)


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch):
    """Keep the `datasets` builder cache inside the test's folder."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")


def _write(path: Path, text: str) -> Path:
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(path.suffix, open)
    with opener(path, "wt", encoding="utf-8") as f:
        f.write(text)
    return path


def _translation_rows(src, tgt, extra=None):
    return [{"translation": {"es": s, "en": t, **(extra or {})}} for s, t in zip(src, tgt)]


def make_source(kind: str, folder: Path, src: list[str], tgt: list[str]) -> SplitConfig:
    """Write the pairs as one kind of source and return the split config that reads them."""
    if kind == "parallel":
        _write(folder / "a.es", "\n".join(src) + "\n"), _write(folder / "a.en", "\n".join(tgt) + "\n")
        return SplitConfig(src=str(folder / "a.es"), tgt=str(folder / "a.en"))
    if kind.startswith("tsv"):
        suffix = kind.removeprefix("tsv")
        rows = [f"ref{i}\t{s}\t{t}\textra" for i, (s, t) in enumerate(zip(src, tgt))]
        path = _write(folder / f"a.tsv{suffix}", "\n".join(rows))  # no final newline
        return SplitConfig(tsv=str(path), tsv_columns=(1, 2))
    if kind == "json":
        lines = [json.dumps(row, ensure_ascii=False) for row in _translation_rows(src, tgt, {"fr": "-"})]
        path = _write(folder / "a.jsonl", "\n".join(lines) + "\n")
        return SplitConfig(dataset="json", data_files=str(path), split="train")
    import datasets

    features = datasets.Features({"translation": datasets.Translation(languages=["en", "es"])})
    ds = datasets.Dataset.from_list(_translation_rows(src, tgt), features=features)
    if kind == "from_disk_dict":
        ds = datasets.DatasetDict({"validation": ds})
    ds.save_to_disk(str(folder / "saved"))
    return SplitConfig(dataset=str(folder / "saved"), from_disk=True, split="validation")


KINDS = ["parallel", "tsv", "tsv.gz", "tsv.xz", "json", "from_disk", "from_disk_dict"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_source_kind_loads_the_same_pairs(kind, tmp_path):
    split = make_source(kind, tmp_path, *PAIRS)
    expected = ([s.strip() for s in PAIRS[0]], PAIRS[1])
    assert load_pairs(split, LANGS) == expected


@pytest.mark.parametrize("kind", ["parallel", "tsv.xz", "json", "from_disk"])
def test_max_examples_keeps_the_first_pairs(kind, tmp_path):
    split = make_source(kind, tmp_path, *PAIRS)
    limited = SplitConfig(**{**vars(split), "max_examples": 2})
    assert load_pairs(limited, LANGS) == (PAIRS[0][:2], PAIRS[1][:2])


def test_the_bundled_corpus_is_intact():
    for name, rows in [("dev", 784), ("test", 1635), ("short/dev", 304)]:
        src, tgt = load_pairs(SplitConfig(tsv=str(BIBLE / f"{name}.tsv.xz"), tsv_columns=(1, 2)), LANGS)
        assert len(src) == len(tgt) == rows and all(src) and all(tgt)
    for name in ("bible_es_en", "demo"):
        config = load_config(ROOT / "configs" / f"{name}.yaml")
        for split in (config.data.train, config.data.valid, config.data.test):
            assert (ROOT / split.tsv).is_file() and split.tsv_columns == (1, 2)


# ---------------------------------------------------------------------------------------------- errors


def _error(split: SplitConfig, data: DataConfig = LANGS) -> str:
    with pytest.raises(UserError) as info:
        load_pairs(split, data)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_file(tmp_path):
    assert str(tmp_path / "nope.tsv") in _error(SplitConfig(tsv=str(tmp_path / "nope.tsv")))
    assert "nope.jsonl" in _error(SplitConfig(dataset="json", data_files=str(tmp_path / "nope.jsonl")))
    assert "saved dataset not found" in _error(SplitConfig(dataset=str(tmp_path / "nope"), from_disk=True))


def test_parallel_files_of_different_lengths(tmp_path):
    _write(tmp_path / "a.es", "uno\ndos\ntres\n"), _write(tmp_path / "a.en", "one\ntwo\n")
    message = _error(SplitConfig(src=str(tmp_path / "a.es"), tgt=str(tmp_path / "a.en")))
    assert "a.es has 3 lines" in message and "a.en has 2" in message


@pytest.mark.parametrize("kind", ["parallel", "tsv", "tsv.xz"])
def test_empty_corpus(kind, tmp_path):
    split = make_source(kind, tmp_path, [], [])
    assert "is empty" in _error(split)


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_undecodable_utf8_names_the_line(suffix, tmp_path):
    path = tmp_path / f"bad.tsv{suffix}"
    opener = gzip.open if suffix else open
    with opener(path, "wb") as f:
        f.write("a\tb\nc\td\né\t\xff\n".encode() + b"e\t\xff\n")
    assert f"{path} line 4 is not valid UTF-8" in _error(SplitConfig(tsv=str(path)))
    assert f"{path} line 4 is not valid UTF-8" in _error(SplitConfig(tsv=str(path), max_examples=10))


def test_tsv_line_without_enough_columns(tmp_path):
    _write(tmp_path / "a.tsv", "r\tuno\tone\nr\tdos\n")
    assert "line 2 has 2 tab-separated column(s)" in _error(
        SplitConfig(tsv=str(tmp_path / "a.tsv"), tsv_columns=(1, 2))
    )


@pytest.mark.parametrize("kind", ["json", "from_disk"])
def test_unknown_language_key(kind, tmp_path):
    split = make_source(kind, tmp_path, *PAIRS)
    message = _error(split, DataConfig(src_lang="es", tgt_lang="de"))
    assert "language 'de'" in message and "en" in message and "es" in message


def test_missing_split_and_missing_translation_column(tmp_path):
    split = make_source("from_disk_dict", tmp_path, *PAIRS)
    assert "not 'train'" in _error(SplitConfig(**{**vars(split), "split": "train"}))
    _write(tmp_path / "b.jsonl", '{"text": "hola"}\n')
    assert "no 'translation' column" in _error(SplitConfig(dataset="json", data_files=str(tmp_path / "b.jsonl")))


def test_unreachable_hub_is_a_user_error(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'wmt14' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    message = _error(SplitConfig(dataset="wmt14", config="de-en", split="train"))
    assert "could not load dataset wmt14 de-en split=train" in message and "offline?" in message


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
    return {"data": {**settings, "train": split("train"), "valid": split("valid"), "cache_dir": str(folder / "c")}
            | data}  # fmt: skip


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

    monkeypatch.setattr(data_module, "_encode", fail)
    monkeypatch.setattr(data_module, "load_pairs", fail)
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


def test_parallel_encoding_equals_serial(monkeypatch):
    monkeypatch.setattr(data_module, "_CHUNK", 3000)  # several chunks per process, results kept in order
    src = [f"hola mundo número {i}" for i in range(20_000)]  # 10k pairs per process at least
    tgt = [f"hello world number {i}" for i in range(20_000)]
    tokenizer = Tokenizer.train(src[:300], tgt[:300], vocab_size=60)
    kwargs = dict(name="train", progress=False)
    serial = data_module._encode(src, tgt, tokenizer, num_proc=1, **kwargs)
    parallel = data_module._encode(src, tgt, tokenizer, num_proc=2, **kwargs)
    assert serial.src(19_999).tolist() == tokenizer.encode_src([src[-1]])[0]
    for name in ("src_tokens", "src_offsets", "tgt_tokens", "tgt_offsets"):
        assert np.array_equal(getattr(serial, name), getattr(parallel, name))


# ---------------------------------------------------------------------------------------------- the command


def test_prepare_command(config_dict, tmp_path, capsys):
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config_dict))  # JSON is YAML
    assert prepare_main(["--config", str(path), "--set", "data.vocab_size=120"]) == 0
    out = capsys.readouterr().out
    assert "vocabulary: 120 joint" in out and "train: 300 pairs" in out and "1 (length_ratio)" in out
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


# ---------------------------------------------------------------------------------------------- issue 18: data


def test_flat_columns_through_a_column_mapping(tmp_path):
    rows = [{"id": i, "es_text": s, "en_text": t} for i, (s, t) in enumerate(zip(*PAIRS))]
    path = _write(tmp_path / "flat.jsonl", "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n")
    split = SplitConfig(dataset="json", data_files=str(path), columns=("es_text", "en_text"))
    assert load_pairs(split, LANGS) == ([s.strip() for s in PAIRS[0]], PAIRS[1])
    assert "no column 'de_text'" in _error(SplitConfig(**{**vars(split), "columns": ("es_text", "de_text")}))
    with pytest.raises(ConfigError, match="columns: \\[source, target\\] goes with a dataset"):
        SplitConfig(tsv="x.tsv", columns=("a", "b"))


def test_several_corpora_are_concatenated_with_weights(tmp_path):
    (tmp_path / "p").mkdir(), (tmp_path / "t").mkdir()
    parallel = make_source("parallel", tmp_path / "p", PAIRS[0][:2], PAIRS[1][:2])
    tsv = make_source("tsv", tmp_path / "t", PAIRS[0][2:], PAIRS[1][2:])
    both = SplitConfig(corpora=[parallel, tsv])
    assert load_pairs(both, LANGS) == ([s.strip() for s in PAIRS[0]], PAIRS[1])
    weighted = SplitConfig(corpora=[SplitConfig(**{**vars(parallel), "weight": 2.0}), tsv])
    src, _ = load_pairs(weighted, LANGS)
    assert src == [*PAIRS[0][:2], *PAIRS[0][:2], *[s.strip() for s in PAIRS[0][2:]]]  # the first corpus twice
    half = SplitConfig(corpora=[parallel, SplitConfig(**{**vars(tsv), "weight": 1.0 / 3})])
    src, tgt = load_pairs(half, LANGS)
    assert len(src) == 3 and src[:2] == PAIRS[0][:2] and tgt[2] in PAIRS[1][2:]  # one of the three tsv pairs
    assert load_pairs(half, LANGS) == (src, tgt)  # the sample is seeded
    with pytest.raises(ConfigError, match="weight must be positive"):
        SplitConfig(tsv="x", weight=0.0)


def test_several_corpora_from_a_config_file(tmp_path):
    make_source("tsv", tmp_path, *PAIRS)
    (tmp_path / "cfg").mkdir()
    text = "data: {src_lang: es, tgt_lang: en, train: {corpora: [{tsv: ../a.tsv, tsv_columns: [1, 2]}, " \
        "{tsv: ../a.tsv, tsv_columns: [1, 2], weight: 0.4}]}}\n"  # fmt: skip
    config = load_config(_write(tmp_path / "cfg" / "c.yaml", text))
    src, _ = load_pairs(config.data.train, config.data)
    assert len(src) == 5 + 2 and config.data.train.corpora[0].tsv == str(tmp_path / "a.tsv")


def test_unreachable_hub_fails_fast_offline(monkeypatch):
    """Without a network, loading goes offline at once (HF_HUB_OFFLINE) instead of retrying for 25 s."""
    from huggingface_hub import constants

    import transformer.corpus as corpus

    monkeypatch.setattr(corpus, "hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    seen = []
    real = __import__("datasets").load_dataset

    def load(*args, **kwargs):
        seen.append(constants.HF_HUB_OFFLINE)
        return real(*args, **kwargs)

    monkeypatch.setattr("datasets.load_dataset", load)
    message = _error(SplitConfig(dataset="no-such-owner/no-such-dataset", split="train"))
    assert seen == [True] and constants.HF_HUB_OFFLINE is False  # offline while loading, restored after
    assert "could not load dataset no-such-owner/no-such-dataset" in message and "offline?" in message


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
    with pytest.raises(
        UserError, match="shipped configs by name: base, bible_es_en, bible_es_en_paper, big, demo, tiny"
    ):
        load_config("nonexistent")


@pytest.mark.parametrize("path", sorted(Path(__file__).parent.parent.glob("configs/*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_config_loads_and_its_local_files_exist(path):
    """Each config in configs/ loads, and every plain-file split it names (resolved against configs/) exists."""
    config = load_config(path)
    for name in ("train", "valid", "test"):
        split = getattr(config.data, name)
        for file in (split.tsv, split.src, split.tgt) if split is not None else ():
            assert file is None or Path(file).is_file(), f"{path.name}: data.{name} names a missing file {file}"
