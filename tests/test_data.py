"""data.py: encoding and filtering into the cache, the cache keys, transformer-prepare; config-relative paths."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_corpus import BIBLE, LANGS, PAIRS, _error, _write, hf_cache, make_source  # noqa: F401 (hf_cache: autouse)

from transformer.commands.cli import prepare_main
from transformer.config import Config, from_dict, load_config, save_config
from transformer.data import corpus
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


# ---------------------------------------------------------------------------------------------- streaming
# The digests below were recorded with the in-memory preparation this streamed one replaced (commit 72b6bd5, which
# read each split whole into Python lists, encoded it and saved it with np.save; its meta.json has the <unk> report
# and its SentencePiece models the byte-fallback setting): sha256 (first 16 hex digits) of each file of each cache
# folder, for the bundled corpus with configs/demo.yaml's data settings and for `synthetic_pairs` below. The streamed
# cache must be byte for byte the same, whatever the chunk sizes. (The token arrays' digests are also those of commit
# 944949a, before the <unk> report and byte fallback.)

BUNDLED = {
    "tokenizer": {"src.model": "71f25f7890ec15e8"},
    "train": {
        "meta.json": "54598204cdc3c9c5",
        "src_offsets.npy": "d9ce9240e8fca945",
        "src_tokens.npy": "449313a8bb977f6e",
        "tgt_offsets.npy": "717d8bd218075331",
        "tgt_tokens.npy": "884bf8c4b50dea1f",
    },
    "valid": {
        "meta.json": "3164457c494a2d6f",
        "src_offsets.npy": "e6b39c77b7d215ac",
        "src_tokens.npy": "5afd87d29a073830",
        "text.json": "531f7f835eec2892",
        "tgt_offsets.npy": "4d68e05e1a19f1a8",
        "tgt_tokens.npy": "f0f8e71b7b04be8f",
    },
    "test": {
        "meta.json": "9a393b7c1b28b7fe",
        "src_offsets.npy": "09498416b6065669",
        "src_tokens.npy": "ada309fd3be2ce14",
        "text.json": "129784d8a3c966d6",
        "tgt_offsets.npy": "cae0ad2a4667daeb",
        "tgt_tokens.npy": "5883071d1377a80f",
    },
}
SYNTHETIC = {
    "tokenizer": {"src.model": "ee656fbe2af5dc95"},
    "train": {
        "meta.json": "1e9132f778284bcc",
        "src_offsets.npy": "fa8e9997644459a4",
        "src_tokens.npy": "4f0df8dd40e7dfa8",
        "tgt_offsets.npy": "0b6a9707346e353b",
        "tgt_tokens.npy": "26aa8760397b364d",
    },
    "valid": {
        "meta.json": "a572f076bea853d7",
        "src_offsets.npy": "ec28c5c789ff5a53",
        "src_tokens.npy": "681e06339aea35f9",
        "text.json": "d66f44101960af1d",
        "tgt_offsets.npy": "397900ed3aa8731c",
        "tgt_tokens.npy": "b9c80cae94f8a0e0",
    },
}


def synthetic_pairs(n: int, seed: int = 7) -> tuple[list[str], list[str]]:
    """n made-up pairs (Zipf-distributed words), among them empty sides, too long and badly proportioned pairs."""
    rng = np.random.default_rng(seed)
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    words = sorted({"".join(syllables[i] for i in rng.integers(0, 70, size=k)) for k in rng.integers(1, 4, size=3000)})
    src, tgt = [], []
    for i in range(n):
        k = int(rng.integers(1, 30))
        ids = rng.zipf(1.4, size=k) % len(words)
        s = " ".join(words[j] for j in ids)
        t = " ".join(words[(j * 7 + 3) % len(words)] for j in ids[: max(1, k - int(rng.integers(0, 3)))])
        t = "" if i % 97 == 0 else t
        s = " ".join([s] * 12) if i % 101 == 0 else s
        t = t + " ña" * 40 if i % 103 == 0 else t
        t = s if i % 89 == 0 else t
        s, t = (src[i - 50], tgt[i - 50]) if i % 83 == 0 and i else (s, t)
        src.append(s.capitalize() + ("." if i % 3 else ""))
        tgt.append(t)
    return src, tgt


ROOT = Path(__file__).resolve().parents[1]


def cache_digests(paths: dict[str, str]) -> dict[str, dict[str, str]]:
    """The digests of each cache folder's files, less the lengths (stored since; checked against the offsets)."""
    digests = {}
    for name, folder in paths.items():
        files = sorted(p for p in Path(folder).iterdir() if not p.name.endswith("_lengths.npy"))
        digests[name] = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in files}
        if name != "tokenizer":
            offsets = [np.load(Path(folder) / f"{side}_offsets.npy") for side in ("src", "tgt")]
            assert np.array_equal(np.load(Path(folder) / "src_lengths.npy"), np.diff(offsets[0]))
            assert np.array_equal(np.load(Path(folder) / "tgt_lengths.npy"), np.diff(offsets[1]) + 1)
    return digests


def small_chunks(monkeypatch, pairs: int) -> None:
    """Chunks of `pairs` pairs, text read in 1,000-byte blocks: chunk and block ends fall inside lines and files."""
    monkeypatch.setattr(data_module, "CHUNK_PAIRS", pairs)
    monkeypatch.setattr(corpus, "BLOCK_BYTES", 1000)


@pytest.mark.parametrize("chunk, procs", [(None, 1), (1000, 2)])
def test_the_bundled_corpus_streams_into_the_same_cache(chunk, procs, tmp_path, monkeypatch):
    if chunk:
        small_chunks(monkeypatch, chunk)
    config = load_config(ROOT / "configs/demo.yaml", [f"data.cache_dir={tmp_path}", f"data.num_proc={procs}"])
    assert cache_digests(prepare_data(config, progress=False).cache_paths) == BUNDLED


def synthetic_config(tmp_path: Path, kind: str = "parallel", **data) -> Config:
    """The 4,000 synthetic training pairs as a source of `kind`, 300 validation pairs as parallel files."""
    (tmp_path / "train").mkdir(exist_ok=True), (tmp_path / "valid").mkdir(exist_ok=True)
    train = make_source(kind, tmp_path / "train", *synthetic_pairs(4000))
    valid = make_source("parallel", tmp_path / "valid", *synthetic_pairs(300, seed=8))
    settings = dict(vocab_size=300, spm_input_sentences=10_000, max_tokens_per_sentence=64, max_length_ratio=2.0)
    config = from_dict({"data": {"src_lang": "es", "tgt_lang": "en", "cache_dir": str(tmp_path / "c"), **settings}})
    return dataclasses.replace(config, data=dataclasses.replace(config.data, train=train, valid=valid, **data))


@pytest.mark.parametrize(
    "kind, chunk, procs",
    [
        ("parallel", None, 1),
        ("parallel", 333, 2),
        ("tsv.gz", 333, 1),
        ("tsv.xz", 250, 2),
        ("json", 333, 1),
        ("from_disk", 250, 2),
    ],
)
def test_every_source_kind_streams_into_the_same_cache(kind, chunk, procs, tmp_path, monkeypatch):
    if chunk:
        small_chunks(monkeypatch, chunk)
    prepared = prepare_data(synthetic_config(tmp_path, kind, num_proc=procs), progress=False)
    assert cache_digests(prepared.cache_paths) == SYNTHETIC


KILLED_RUN = """
import json, os, signal, sys
from transformer.config import load_config
from transformer.data import encoded, prepare
prepare.CHUNK_PAIRS = 500
append, calls = encoded.SplitWriter.append, []
def killing_append(writer, *arrays):  # SIGKILL in the middle of writing the training split, after 3 chunks
    append(writer, *arrays)
    calls.append(1)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
encoded.SplitWriter.append = killing_append
prepare.prepare_data(load_config(sys.argv[1]), progress=False)
"""


def test_a_killed_preparation_leaves_nothing_taken_as_complete(tmp_path):
    config = synthetic_config(tmp_path)
    save_config(config, tmp_path / "config.yaml")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    killed = subprocess.run([sys.executable, "-c", KILLED_RUN, str(tmp_path / "config.yaml")], env=env)
    assert killed.returncode == -signal.SIGKILL
    cache = tmp_path / "c"
    assert [p.name[:7] for p in cache.glob(".train-*")] == [".train-"]  # the killed run's half-written folder
    assert not list(cache.glob("train-*")) and list(cache.glob("tokenizer-*"))
    prepared = prepare_data(config, progress=False)
    assert cache_digests(prepared.cache_paths) == SYNTHETIC
    assert not list(cache.glob(".*"))  # the rerun removed what the killed one left


def brute_force_filter(pairs, tokenizer, data) -> tuple[list[tuple], dict[str, int]]:
    """The kept pairs' (source ids, target ids) and the drop counts, pair by pair, as cleaning.py's table says."""
    kept, dropped, seen = (
        [],
        dict.fromkeys(["empty", "too_long", "length_ratio", "source_is_target", "duplicate"], 0),
        set(),
    )
    for s, t, src, tgt in zip(*pairs, tokenizer.encode_src(pairs[0]), tokenizer.encode_tgt(pairs[1])):
        S, T = len(src), len(tgt) + 1
        if S <= 1 or T <= 1:
            dropped["empty"] += 1
        elif max(S, T) > data.max_tokens_per_sentence:
            dropped["too_long"] += 1
        elif max(S, T) / min(S, T) > data.max_length_ratio:
            dropped["length_ratio"] += 1
        elif s == t:
            dropped["source_is_target"] += 1
        elif (s, t) in seen:
            dropped["duplicate"] += 1
        else:
            seen.add((s, t))
            kept.append((src, tgt))
    return kept, dropped


def test_copies_and_duplicates_are_dropped_and_counted(tmp_path, monkeypatch):
    small_chunks(monkeypatch, 700)  # duplicates within a chunk and across chunks
    src, tgt = synthetic_pairs(4000)
    src += src[10:1500:3] + ["Misma frase.", "Otra frase"] * 5
    tgt += tgt[10:1500:3] + ["Misma frase.", "Otra frase"] * 5  # the last ten: five copies of two copies
    config = synthetic_config(tmp_path, drop_copies=True, drop_duplicates=True, num_proc=2)
    (tmp_path / "more").mkdir()
    train = make_source("parallel", tmp_path / "more", src, tgt)
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, train=train))
    prepared = prepare_data(config, progress=False)
    split = prepared.splits["train"]
    kept, dropped = brute_force_filter((src, tgt), prepared.tokenizer, config.data)
    assert split.dropped == dropped and dropped["duplicate"] > 500 and dropped["source_is_target"] >= 10
    assert [(split.src(i).tolist(), split.tgt(i).tolist()) for i in range(len(split))] == kept


# Per-update training losses of configs/tiny.yaml with the overrides below for 6 updates, recorded with the
# in-memory preparation (commit 944949a) on the same 2-core AMD EPYC (Zen 4) CPU, torch 2.13.0+cpu.
TINY_LOSSES = {
    1: 6.285813956425108,
    2: 6.1837990500710225,
    3: 6.211216676751139,
    4: 6.240227298460145,
    5: 6.054831018675434,
    6: 6.096029560217697,
}


@pytest.mark.slow
def test_training_from_the_streamed_cache_gives_the_same_losses(tmp_path):
    from transformer.commands.cli import train_main

    settings = [
        f"train.out_dir={tmp_path}/run",
        f"data.cache_dir={tmp_path}/c",
        "train.log_every=1",
        "train.max_steps=6",
        "train.valid_every=0",
        "train.valid_bleu=false",
        "train.max_tokens=512",
        "train.update_tokens=600",
        "train.prefetch=0",
        "train.threads=1",
    ]
    args = ["--config", str(ROOT / "configs/tiny.yaml"), "--no-progress", *(a for s in settings for a in ("--set", s))]
    assert train_main(args) == 0
    records = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["loss"] for r in records if "loss" in r and "valid_loss" not in r}
    assert losses == pytest.approx(TINY_LOSSES, rel=1e-5)


def test_uniform_indices_are_distinct_sorted_and_uniform():
    rng = np.random.default_rng(0)
    picks = [tuple(data_module.uniform_indices(5, 2, rng).tolist()) for _ in range(20_000)]
    assert all(a < b for a, b in picks)
    counts = np.unique(picks, axis=0, return_counts=True)[1]
    assert len(counts) == 10 and counts.min() > 1800 and counts.max() < 2200  # each of the 10 subsets ~2,000 times
    big = data_module.uniform_indices(10**9, 50_000, rng)
    assert len(np.unique(big)) == 50_000 and big.max() < 10**9


def test_the_tokenizer_sample_is_all_below_its_size_and_a_seeded_sample_above(monkeypatch):
    src = [f"fuente {i}" if i % 7 else "" for i in range(1000)]  # one in seven empty, not sampled
    tgt = [f"target {i}" for i in range(1000)]
    chunks = lambda: ((src[i : i + 64], tgt[i : i + 64]) for i in range(0, 1000, 64))
    below = data_module.sample_sentences(chunks, 1000, seed=1)
    assert below == ([s for s in src if s], tgt)  # every non-empty sentence, in order
    above = data_module.sample_sentences(chunks, 300, seed=1)
    assert len(above[0]) == len(above[1]) == 300 and above == data_module.sample_sentences(chunks, 300, seed=1)
    assert above[0] == sorted(above[0], key=src.index) and set(above[0]) <= set(src) - {""}
    assert above[1] == sorted(above[1], key=tgt.index) and above != data_module.sample_sentences(chunks, 300, seed=2)
    held = []
    assert data_module.sample_sentences(chunks, 1000, seed=1, held=held) == below
    assert held == list(chunks())  # the corpus is within the sample: its chunks are kept for the encoding
    assert data_module.sample_sentences(chunks, 300, seed=1, held=held) == above and held == []


@pytest.mark.parametrize("spm_input_sentences, reads", [(10_000, 1), (2_000, 3)])
def test_the_training_corpus_is_read_once_when_the_sample_holds_it(spm_input_sentences, reads, tmp_path, monkeypatch):
    """Within the sample, the sample's pass is the only read of the training split; beyond it, the sample takes
    two passes (count, pick) and the encoding a third."""
    config = synthetic_config(tmp_path, spm_input_sentences=spm_input_sentences)
    calls = []
    stream = data_module.stream_pairs
    monkeypatch.setattr(data_module, "stream_pairs", lambda split, *a: calls.append(split) or stream(split, *a))
    prepared = prepare_data(config, progress=False)
    train = prepared.splits["train"]
    assert calls.count(config.data.train) == reads and len(train) + sum(train.dropped.values()) == 4000
