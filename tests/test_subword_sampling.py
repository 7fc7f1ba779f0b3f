"""data.subword_sampling: the sampled copies of the training split (seeded, cached, filtered like it) and the
sampler that trains epoch e on copy e mod K, resumed exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_corpus import hf_cache  # noqa: F401 (autouse)
from test_data import bible_config
from test_data_streaming import ROOT, cache_digests
from test_trainer import _args, _losses

from transformer.checkpoint import load_checkpoint
from transformer.commands.cli import train_main
from transformer.config import ConfigError, from_dict, save_config
from transformer.data import prepare as data_module
from transformer.data import subword_sampling
from transformer.data.batching import TokenBatchSampler
from transformer.data.encoded import EncodedSplit
from transformer.data.prepare import PreparedData, prepare_data
from transformer.data.subword_sampling import SegmentedBatchSampler, merge_rows
from transformer.data.tokenizer import seeds_repeat_across_processes
from transformer.errors import UserError
from transformer.training.trainer import train_batches


@pytest.fixture
def values(tmp_path) -> dict:
    return bible_config(tmp_path)  # once per test: writing the files again would change their identity


def _config(values: dict, cache: str = "c", seed: int = 1, data: dict | None = None, **sampling):
    folder = values["data"]["cache_dir"] + cache
    settings = {**values["data"], "cache_dir": folder, **(data or {})}
    settings["subword_sampling"] = {"alpha": 0.1, "segmentations": 3, **sampling}
    return from_dict({"data": settings, "train": {"seed": seed}})


def _rows(split: EncodedSplit) -> list[tuple[list[int], list[int]]]:
    return [(split.src(i).tolist(), split.tgt(i).tolist()) for i in range(len(split))]


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_copies_are_seeded_differ_and_hold_the_same_text(model_type, values, monkeypatch):
    """BPE-dropout and unigram sampling: two preparations with one seed in this process (1 encoding process,
    then 2) sample the same copies; the copies differ from each other and from the deterministic split, are
    longer, and decode to the same sentences, pair for pair."""
    monkeypatch.setattr(subword_sampling, "CHUNK_PAIRS", 70)  # 5 chunks: the seeds follow the chunk, not the process
    first = prepare_data(_config(values, data={"spm_model_type": model_type}), progress=False)
    config = _config(values, "2", data={"spm_model_type": model_type, "num_proc": 2})
    second = prepare_data(config, progress=False)
    copies = lambda p: {k: v for k, v in p.cache_paths.items() if k.startswith("train_sampled")}
    assert cache_digests(copies(first)) == cache_digests(copies(second)) and len(copies(first)) == 3
    train, tokenizer = first.splits["train"], first.tokenizer
    rows = [_rows(split) for split in (train, *first.segmentations)]
    assert all(a != b for i, a in enumerate(rows) for b in rows[i + 1 :])
    text = lambda split, side: tokenizer.decode_tgt([getattr(split, side)(i).tolist() for i in range(len(split))])
    for copy in first.segmentations:
        assert len(copy) == len(train) and copy.src_lengths.sum() > train.src_lengths.sum()
        assert text(copy, "src") == text(train, "src") and text(copy, "tgt") == text(train, "tgt")


PREPARE = "import sys; from transformer.config import load_config; from transformer.data.prepare import prepare_data; "
PREPARE += "prepare_data(load_config(sys.argv[1]), progress=False)"


def test_another_process_samples_alike_exactly_where_sentencepiece_repeats_seeds(values, tmp_path):
    """Two processes prepare one setting into two caches: their copies match byte for byte exactly when
    `seeds_repeat_across_processes` says so (a seeded mt19937 up to SentencePiece 0.2.1; absl's salted BitGen from
    0.2.2 on samples other pieces in another process, with odds of 2**-32 against). The preparation warns then."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    digests = []
    for name in ("a", "b"):
        save_config(_config(values, name), tmp_path / f"{name}.yaml")
        run = subprocess.run([sys.executable, "-c", PREPARE, tmp_path / f"{name}.yaml"], env=env, capture_output=True)
        assert run.returncode == 0, run.stderr.decode()
        assert ("salts its sampling seeds" in run.stderr.decode()) != seeds_repeat_across_processes()
        paths = prepare_data(_config(values, name), progress=False).cache_paths  # read back: nothing sampled again
        digests.append(cache_digests({k: v for k, v in paths.items() if k.startswith("train_sampled")}))
    assert (digests[0] == digests[1]) == seeds_repeat_across_processes() and len(digests[0]) == 3


def test_pairs_over_the_limit_keep_the_deterministic_segmentation(values):
    """Each pair of a copy under a limit of 40 is, exactly: its sampled pieces (read from a copy of the same seed
    without the limit, sampled in this process) where they fit, else its deterministic pieces; meta.json counts
    the second kind, and both kinds occur."""
    limited = prepare_data(_config(values, data={"max_tokens_per_sentence": 40}), progress=False)
    free = prepare_data(_config(values, "free"), progress=False)  # the limit filters after sampling: same draws
    train, copy = _rows(limited.splits["train"]), _rows(limited.segmentations[0])
    free_train, free_copy = _rows(free.splits["train"]), _rows(free.segmentations[0])
    matches = iter(range(len(free_train)))
    fallbacks = 0
    for pair, sampled in zip(train, copy):
        j = next(j for j in matches if free_train[j] == pair)  # both splits keep the corpus order
        fits = len(free_copy[j][0]) <= 40 and len(free_copy[j][1]) + 1 <= 40  # + 1: the decoder's BOS
        assert sampled == (free_copy[j] if fits else pair)
        fallbacks += not fits
    meta = json.loads((Path(limited.cache_paths["train_sampled_0"]) / "meta.json").read_text())
    assert meta["deterministic_pairs"] == fallbacks > 0 and sum(a != b for a, b in zip(train, copy)) > 0


def test_the_cache_is_reused_only_for_the_same_setting(values, monkeypatch):
    """The same setting reads every copy back; a new alpha or seed samples new ones; more copies keep the old;
    the deterministic train, valid and tokenizer folders are the ones without sampling."""
    plain = prepare_data(
        from_dict({**values, "data": {**values["data"], "cache_dir": values["data"]["cache_dir"] + "c"}}),
        progress=False,
    )
    first = prepare_data(_config(values), progress=False).cache_paths
    assert {k: first[k] for k in plain.cache_paths} == plain.cache_paths

    def fail(*args, **kwargs):
        raise AssertionError("the cache should have been used")

    with monkeypatch.context() as patch:
        patch.setattr(subword_sampling, "encode_chunks", fail)
        patch.setattr(data_module, "encode_chunks", fail)
        assert prepare_data(_config(values), progress=False).cache_paths == first
    for changed in (_config(values, alpha=0.2), _config(values, seed=2)):
        paths = prepare_data(changed, progress=False).cache_paths
        assert all(paths[f"train_sampled_{k}"] != first[f"train_sampled_{k}"] for k in range(3))
        assert paths["train"] == first["train"] and paths["valid"] == first["valid"]
    more = prepare_data(_config(values, segmentations=4), progress=False).cache_paths
    assert {k: more[k] for k in first} == first and "train_sampled_3" in more


@pytest.mark.parametrize(
    "setting, message",
    [
        ("{alpha: 0.1, segments: 2}", "unknown config key 'data.subword_sampling.segments'"),
        ("{alpha: high}", "data.subword_sampling.alpha must be a number"),
        ("0.1", "must be a mapping"),
        ("{alpha: 0}", r"alpha must be in \(0, 1\]"),
        ("{alpha: 0.1, segmentations: 0}", "segmentations must be >= 1"),
        ("{segmentations: 2}", "alpha"),
    ],
)
def test_config_errors(setting, message, tmp_path, capsys):
    assert train_main(_args(tmp_path, "run", f"data.subword_sampling={setting}")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:")
    with pytest.raises(ConfigError, match=message):
        from_dict({"data": {"subword_sampling": __import__("yaml").safe_load(setting)}})


def test_merge_rows_by_hand():
    first = (np.array([1, 2, 3, 4, 5, 6]), np.array([2, 1, 3]))  # rows [1 2] [3] [4 5 6]
    second = (np.array([7, 8, 9, 10]), np.array([1, 2, 1]))  # rows [7] [8 9] [10]
    tokens, lengths = merge_rows(first, second, np.array([False, True, False]))
    assert tokens.tolist() == [7, 3, 10] and lengths.tolist() == [1, 1, 1]
    tokens, lengths = merge_rows(first, second, np.array([True, False, True]))
    assert tokens.tolist() == [1, 2, 8, 9, 4, 5, 6] and lengths.tolist() == [2, 2, 3]


def _copies(count: int, pairs: int = 12) -> list[EncodedSplit]:
    """`count` copies of `pairs` pairs, copy k's pair i made of the tokens 100 k + i (k + 1 of them a side)."""
    rows = lambda k: [[100 * k + i] * (k + 1 + i % 3) for i in range(pairs)]
    return [EncodedSplit.from_lists([r + [3] for r in rows(k)], rows(k)) for k in range(count)]


def _sampler(copies: list[EncodedSplit], setting: str = "alpha=0.1 segmentations=2") -> SegmentedBatchSampler:
    make = lambda s: TokenBatchSampler(s.src_lengths, s.tgt_lengths, max_tokens=12, seed=3)
    return SegmentedBatchSampler([make(s) for s in copies], setting)


def test_epoch_e_trains_on_copy_e_mod_k():
    """The batches of epoch e come from copy e mod K (their tokens say which), every pair once an epoch."""
    copies = _copies(2)
    data = PreparedData(tokenizer=type("T", (), {"bos_id": 2})(), splits={"train": copies[0]}, segmentations=copies)
    cfg = type("Train", (), {"max_epochs": 4, "length_buckets": False})()
    seen: dict[int, list[int]] = {}
    for state, batch in train_batches(data, sampler := _sampler(copies), cfg):
        epoch = state["epoch"]  # the state after the batch: still its epoch after the epoch's last batch
        seen.setdefault(epoch, []).extend(batch.indices)
        assert (batch.src[:, 0] // 100 == epoch % 2).all()
    assert sorted(seen) == [0, 1, 2, 3] and all(sorted(v) == list(range(12)) for v in seen.values())
    assert sampler.epoch == 4


@pytest.mark.parametrize("stop", [1, 5, 9])
def test_resume_continues_the_copies_and_batches(stop):
    copies = _copies(3)
    full = _sampler(copies)
    whole = [b for _ in range(4) for b in full]
    partial, drawn = _sampler(copies), []
    for _ in range(4):
        for b in partial:
            drawn.append(b)
            if len(drawn) == stop:
                break
        if len(drawn) == stop:
            break
    resumed = _sampler(copies)
    resumed.load_state_dict(partial.state_dict())
    while resumed.epoch < 4:
        drawn.extend(resumed)
    assert drawn == whole


def test_resume_refuses_another_sampling_setting():
    copies = _copies(2)
    state = _sampler(copies).state_dict()
    with pytest.raises(UserError, match="data.subword_sampling alpha=0.1 segmentations=2, now alpha=0.2"):
        _sampler(copies, "alpha=0.2 segmentations=2").load_state_dict(state)
    plain = TokenBatchSampler(copies[0].src_lengths, copies[0].tgt_lengths, max_tokens=12, seed=3)
    with pytest.raises(UserError, match="now off"):
        plain.load_state_dict(state)
    with pytest.raises(UserError, match="saved with data.subword_sampling off"):
        _sampler(copies).load_state_dict(plain.state_dict())


def test_resume_with_sampling_is_exact(tmp_path):
    """As test_trainer's test_resume_is_exact, over epochs of 2 sampled copies (100 pairs: a few updates each)."""
    small = ["data.train.max_examples=100", "data.subword_sampling={alpha: 0.1, segmentations: 2}"]
    assert train_main(_args(tmp_path, "full", "train.max_steps=25", "train.prefetch=0", *small)) == 0
    assert train_main(_args(tmp_path, "split", "train.max_steps=12", *small)) == 0
    assert train_main(_args(tmp_path, "split", "train.max_steps=25", *small) + ["--resume"]) == 0
    full, split = _losses(tmp_path / "full"), _losses(tmp_path / "split")
    assert sorted(split) == list(range(1, 26)) and split == full
    state = load_checkpoint(tmp_path / "split/checkpoint_last.pt")["sampler"]
    assert state["epoch"] >= 2 and state["subword_sampling"] == "alpha=0.1 segmentations=2"
