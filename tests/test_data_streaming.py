"""The streamed preparation (data/prepare.py): the cache byte for byte as the in-memory preparation wrote it, for
the bundled corpus and every source kind, across chunk and read-block boundaries and over 1 or 2 processes; a
killed preparation leaves nothing taken as complete; copies and duplicates are dropped as a brute force drops them;
training from the streamed cache gives the recorded losses; the tokenizer's sample and the reads it takes."""

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
from test_corpus import hf_cache, make_source  # noqa: F401 (hf_cache: autouse)

from transformer.config import Config, from_dict, load_config, save_config
from transformer.data import case_augmentation, corpus
from transformer.data import prepare as data_module
from transformer.data.prepare import prepare_data

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


class CountingRng:
    """A numpy Generator that counts its `integers` calls: one call is one pass of `uniform_indices`."""

    def __init__(self, seed: int) -> None:
        self.rng, self.passes = np.random.default_rng(seed), 0

    def integers(self, *args, **kwargs):
        self.passes += 1
        return self.rng.integers(*args, **kwargs)


@pytest.mark.parametrize(
    "n, k, most_passes",
    [(100_001, 100_000, 1), (20_001, 20_000, 1), (200_000, 100_000, 4), (200_000, 100_001, 4), (10, 10, 0), (7, 0, 0)],
)
def test_uniform_indices_near_and_past_half_take_few_passes(n, k, most_passes):
    """k = n - 1 drew one index to leave out (it took minutes when it searched for the last free values); at k = n/2
    each pass draws what is missing scaled by the free share, so the passes stay few; k = n and k = 0 draw nothing."""
    rng = CountingRng(3)
    picks = data_module.uniform_indices(n, k, rng)
    assert len(picks) == k and len(np.unique(picks)) == k and (k == 0 or (picks.min() >= 0 and picks.max() < n))
    assert (np.diff(picks) > 0).all() and rng.passes <= most_passes


def test_uniform_indices_past_half_are_uniform_over_subsets():
    """Past half the indices are the complement of a uniform draw: each of the C(6, 4) = 15 subsets about equally
    often (20,000 draws: 1,333 expected each)."""
    rng = np.random.default_rng(1)
    picks = [tuple(data_module.uniform_indices(6, 4, rng).tolist()) for _ in range(20_000)]
    counts = np.unique(picks, axis=0, return_counts=True)[1]
    assert len(counts) == 15 and counts.min() > 1150 and counts.max() < 1520
    with pytest.raises(ValueError):
        data_module.uniform_indices(3, 4, rng)


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
    counted = lambda split, *a: calls.append(split) or stream(split, *a)
    monkeypatch.setattr(data_module, "stream_pairs", counted)
    monkeypatch.setattr(case_augmentation, "stream_pairs", counted)  # the training split's reads go through it
    prepared = prepare_data(config, progress=False)
    train = prepared.splits["train"]
    assert calls.count(config.data.train) == reads and len(train) + sum(train.dropped.values()) == 4000
