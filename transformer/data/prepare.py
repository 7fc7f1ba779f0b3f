"""Prepared data: the SentencePiece vocabulary and every split encoded once into a memory-mapped cache.

`prepare_data(config)` (what `transformer-prepare` runs, and what training calls) does, for each configured split:

1. read the raw pairs (`transformer.data.corpus.load_pairs`: plain files, TSV or `datasets`);
2. train SentencePiece on the training pairs (section 5.1: a shared source-target BPE vocabulary), cached in
   `<cache_dir>/tokenizer-<hash>/` keyed by the training data's identity and the vocabulary settings;
3. encode in chunks of 50k pairs over `data.num_proc` processes;
4. filter the training split only: drop pairs with an empty side, with a side longer than
   `data.max_tokens_per_sentence` tokens, or whose length ratio exceeds `data.max_length_ratio`; lengths are the
   model's sequence lengths, source pieces + EOS and target pieces + 1 (the length of tgt_in and tgt_out);
5. store int32 token arrays + int64 offsets with `np.save` in `<cache_dir>/<split>-<hash>/`, keyed by the split's
   identity (file path, size and mtime, or the `datasets` arguments), the settings that change its encoding and the
   tokenizer bytes; later calls load them with `np.load(mmap_mode="r")` and encode nothing.

Cache folders are written under a temporary name and renamed into place, so an interrupted run or several ranks
preparing at once never leave a half-written folder behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import multiprocessing
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from transformer.config import Config, DataConfig
from transformer.data.corpus import describe_split, load_pairs, split_identity
from transformer.data.coverage import describe_unknown, unknown_share
from transformer.data.tokenizer import Tokenizer
from transformer.errors import UserError
from transformer.progress import spinner

__all__ = ["EncodedSplit", "PreparedData", "load_pairs", "prepare_data"]

log = logging.getLogger(__name__)

CACHE_VERSION = 1  # bump when the cache layout or the encoding changes
SPLITS = ("train", "valid", "test")
_ARRAYS = ("src_tokens", "src_offsets", "tgt_tokens", "tgt_offsets")


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


@dataclass
class EncodedSplit:
    """One encoded split: every sequence back to back in a flat int32 array, found through int64 offsets."""

    src_tokens: np.ndarray  # (total source tokens,) int32: source pieces + EOS of every pair, back to back
    src_offsets: np.ndarray  # (n + 1,) int64: pair i's source is src_tokens[src_offsets[i]:src_offsets[i + 1]]
    tgt_tokens: np.ndarray  # (total target pieces,) int32: target pieces (no BOS/EOS), back to back
    tgt_offsets: np.ndarray  # (n + 1,) int64
    src_text: list[str] | None = None  # raw text kept for valid/test (translation input); None for train
    tgt_text: list[str] | None = None  # raw references kept for valid/test (BLEU); None for train
    dropped: dict[str, int] = field(default_factory=dict)  # training pairs filtered out, by reason
    src_lengths: np.ndarray = field(init=False)  # (n,) int32, tokens incl. the EOS
    tgt_lengths: np.ndarray = field(init=False)  # (n,) int32, target pieces + 1 (length of tgt_in and tgt_out)

    def __post_init__(self) -> None:
        self.src_lengths = np.diff(self.src_offsets).astype(np.int32)
        self.tgt_lengths = np.diff(self.tgt_offsets).astype(np.int32) + 1

    @classmethod
    def from_lists(
        cls, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], src_text=None, tgt_text=None
    ) -> EncodedSplit:
        """From Python lists: `src` rows end with EOS (as `encode_src` gives), `tgt` rows are pieces only."""
        if len(src) != len(tgt):
            raise ValueError(f"src has {len(src)} rows but tgt has {len(tgt)}")
        flat = [np.fromiter((t for row in rows for t in row), dtype=np.int32) for rows in (src, tgt)]
        lengths = [np.fromiter(map(len, rows), dtype=np.int64, count=len(rows)) for rows in (src, tgt)]
        return cls(flat[0], _offsets(lengths[0]), flat[1], _offsets(lengths[1]), src_text, tgt_text)

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    def __repr__(self) -> str:
        text = "kept" if self.src_text is not None else "none"
        return (
            f"EncodedSplit(pairs={len(self)}, src_tokens={int(self.src_lengths.sum())}, "
            f"tgt_tokens={int(self.tgt_lengths.sum())}, text={text}, dropped={self.dropped})"
        )

    def src(self, i: int) -> np.ndarray:
        """(S_i,) int32 source ids of pair i, ending with EOS."""
        return self.src_tokens[self.src_offsets[i] : self.src_offsets[i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        """(T_i - 1,) int32 target pieces of pair i, without BOS/EOS."""
        return self.tgt_tokens[self.tgt_offsets[i] : self.tgt_offsets[i + 1]]

    def select(self, keep: np.ndarray) -> EncodedSplit:
        """The pairs where the boolean mask `keep` (n,) is True, in order (vectorised gather, no Python loop)."""
        arrays = []
        for tokens, offsets in ((self.src_tokens, self.src_offsets), (self.tgt_tokens, self.tgt_offsets)):
            lengths = np.diff(offsets)
            arrays += [tokens[np.repeat(keep, lengths)], _offsets(lengths[keep])]
        texts = [None if t is None else [s for s, k in zip(t, keep) if k] for t in (self.src_text, self.tgt_text)]
        return EncodedSplit(*arrays, *texts, dropped=dict(self.dropped))


@dataclass
class PreparedData:
    tokenizer: Tokenizer
    splits: dict[str, EncodedSplit]  # keys among "train", "valid", "test" (those configured)
    cache_paths: dict[str, str] = field(default_factory=dict)  # "tokenizer" and each split -> its cache folder


# ---------------------------------------------------------------------------------------------- encoding


def _peak_rss_gb(who: int) -> float:
    """Peak resident memory in GB of this process (RUSAGE_SELF) or of its largest finished child (CHILDREN)."""
    return resource.getrusage(who).ru_maxrss / (1e9 if sys.platform == "darwin" else 1e6)


@contextlib.contextmanager
def _stage(what: str) -> Iterator[None]:
    """Log a preparation stage's wall time and the peak memory so far (docs/benchmarks.md, the WMT-scale data path)."""
    start = time.perf_counter()
    yield
    log.info(
        "%s: %.1f s; peak memory so far %.2f GB (this process), %.2f GB (largest worker)",
        what, time.perf_counter() - start, _peak_rss_gb(resource.RUSAGE_SELF), _peak_rss_gb(resource.RUSAGE_CHILDREN),
    )  # fmt: skip


_CHUNK = 50_000  # pairs per encoding task
_worker_tokenizer: Tokenizer | None = None  # set once in each encoding process


def _init_worker(blobs: dict) -> None:
    global _worker_tokenizer
    _worker_tokenizer = Tokenizer.from_bytes(blobs)


def _pack(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Ragged Python rows -> (flat int32 tokens, int64 lengths)."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32, count=int(lengths.sum()))
    return flat, lengths


def _encode_chunk(src: list[str], tgt: list[str], tokenizer: Tokenizer | None = None) -> tuple[np.ndarray, ...]:
    """(src tokens, src lengths, tgt tokens, tgt lengths) of one chunk, as numpy arrays (cheap to send back)."""
    tokenizer = tokenizer or _worker_tokenizer
    return *_pack(tokenizer.encode_src(src)), *_pack(tokenizer.encode_tgt(tgt))


def _encode(src: list[str], tgt: list[str], tokenizer: Tokenizer, *, num_proc: int, name: str, progress: bool):
    """Encode raw pairs in chunks of 50k, over `num_proc` processes (one per 10k pairs at least), into an
    EncodedSplit. Workers return numpy arrays, never Python lists: 1.2-1.4x faster on 2 cores than the
    `datasets.Dataset.map` it replaces, which converted every list of ids to Arrow (docs/benchmarks.md).
    """
    starts = range(0, len(src), _CHUNK)
    src_chunks, tgt_chunks = (src[i : i + _CHUNK] for i in starts), (tgt[i : i + _CHUNK] for i in starts)
    procs = min(num_proc, max(1, len(src) // 10_000))
    bar = tqdm(total=len(src), unit="pairs", desc=f"encoding {name}", disable=not progress, dynamic_ncols=True)
    parts: list[tuple[np.ndarray, ...]] = []
    with bar, contextlib.ExitStack() as stack:
        if procs > 1:  # fork where there is one (workers touch no torch), so callers need no __main__ guard
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            pool = stack.enter_context(
                ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context(method), initializer=_init_worker,
                                    initargs=(tokenizer.to_bytes(),))
            )  # fmt: skip
            results = pool.map(_encode_chunk, src_chunks, tgt_chunks)
        else:
            results = (_encode_chunk(s, t, tokenizer) for s, t in zip(src_chunks, tgt_chunks))
        for part in results:
            parts.append(part)
            bar.update(len(part[1]))
    if not parts:
        return EncodedSplit.from_lists([], [])
    src_tokens, src_lengths, tgt_tokens, tgt_lengths = (np.concatenate(column) for column in zip(*parts))
    return EncodedSplit(src_tokens, _offsets(src_lengths), tgt_tokens, _offsets(tgt_lengths))


def filter_pairs(split: EncodedSplit, data: DataConfig) -> EncodedSplit:
    """Drop training pairs with an empty side, a side over `max_tokens_per_sentence`, or a ratio over the limit.

    Each dropped pair is counted once, under the first reason in that order; counts go to `dropped` and the log.
    """
    src_len, tgt_len = split.src_lengths.astype(np.int64), split.tgt_lengths.astype(np.int64)
    empty = (src_len <= 1) | (tgt_len <= 1)  # no pieces besides the EOS
    too_long = ~empty & ((src_len > data.max_tokens_per_sentence) | (tgt_len > data.max_tokens_per_sentence))
    ratio = np.maximum(src_len, tgt_len) / np.maximum(np.minimum(src_len, tgt_len), 1)
    bad_ratio = ~empty & ~too_long & (ratio > data.max_length_ratio) if data.max_length_ratio > 0 else empty & False
    keep = ~(empty | too_long | bad_ratio)
    dropped = {"empty": int(empty.sum()), "too_long": int(too_long.sum()), "length_ratio": int(bad_ratio.sum())}
    log.info(
        "train: kept %d of %d pairs; dropped %d with an empty side, %d longer than %d tokens, "
        "%d with a length ratio above %g",
        int(keep.sum()), len(keep), dropped["empty"], dropped["too_long"], data.max_tokens_per_sentence,
        dropped["length_ratio"], data.max_length_ratio,
    )  # fmt: skip
    if not keep.any():
        raise UserError(
            f"no training pairs left after filtering ({dropped}); check the data, data.max_tokens_per_sentence "
            "and data.max_length_ratio"
        )
    kept = split.select(keep)
    kept.dropped = dropped
    return kept


def drop_longer(split: EncodedSplit, limit: int, name: str) -> EncodedSplit:
    """An evaluation split without the pairs whose source or target exceeds `limit` tokens (`model.max_positions`),
    which the model cannot take; the count goes to the log and `dropped["too_long_for_model"]`."""
    keep = (split.src_lengths <= limit) & (split.tgt_lengths <= limit)
    if keep.all():
        return split
    log.warning("%s: left out %d of %d pairs longer than model.max_positions (%d tokens)", name,
                int((~keep).sum()), len(keep), limit)  # fmt: skip
    kept = split.select(keep)
    kept.dropped = {**split.dropped, "too_long_for_model": int((~keep).sum())}
    return kept


# ---------------------------------------------------------------------------------------------- the cache


def _hash(*parts: Any) -> str:
    digest = hashlib.sha256()
    for part in parts:
        blob = part if isinstance(part, bytes) else json.dumps(part, sort_keys=True, default=str).encode()
        digest.update(len(blob).to_bytes(8, "little") + blob)  # length-prefixed: parts cannot run into each other
    return digest.hexdigest()[:16]


def _write_atomically(folder: Path, write: Callable[[Path], None]) -> None:
    """Run `write(tmp)` on a fresh temporary folder next to `folder`, then rename it into place."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        write(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared like the rest of the checkout
        os.replace(tmp, folder)
    except OSError:
        if not folder.is_dir():  # another process finished the same folder first: keep theirs
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _save_split(folder: Path, split: EncodedSplit, meta: dict[str, Any]) -> None:
    for name in _ARRAYS:
        np.save(folder / f"{name}.npy", np.ascontiguousarray(getattr(split, name)))
    if split.src_text is not None:
        (folder / "text.json").write_text(json.dumps({"src": split.src_text, "tgt": split.tgt_text}), "utf-8")
    (folder / "meta.json").write_text(json.dumps({**meta, "dropped": split.dropped}, indent=1), "utf-8")


def _load_split(folder: Path) -> EncodedSplit:
    arrays = [np.load(folder / f"{name}.npy", mmap_mode="r") for name in _ARRAYS]
    meta = json.loads((folder / "meta.json").read_text("utf-8"))
    text = folder / "text.json"
    texts = json.loads(text.read_text("utf-8")) if text.is_file() else {"src": None, "tgt": None}
    return EncodedSplit(*arrays, texts["src"], texts["tgt"], dropped=meta.get("dropped", {}))


def _tokenizer_key(data: DataConfig, seed: int) -> str:
    settings = {k: getattr(data, k) for k in ("src_lang", "tgt_lang", "vocab_size", "spm_model_type", "joint_vocab")}
    settings.update(spm_input_sentences=data.spm_input_sentences, character_coverage=data.character_coverage)
    if data.spm_byte_fallback:  # only when on, so the keys of existing caches stay as they were
        settings.update(spm_byte_fallback=True)
    return _hash(CACHE_VERSION, split_identity(data.train), settings, seed)


def _prepare_tokenizer(
    data: DataConfig, cache: Path, train_pairs: Callable[[], tuple[list[str], list[str]]], progress: bool = True
):
    seed = 1  # the vocabulary does not depend on train.seed, so runs with different seeds share it
    folder = cache / f"tokenizer-{_tokenizer_key(data, seed)}"
    if (folder / "src.model").is_file():
        log.info("tokenizer: cached in %s", folder)
        tgt = folder / "tgt.model"
        return Tokenizer((folder / "src.model").read_bytes(), tgt.read_bytes() if tgt.is_file() else None), folder
    src, tgt = train_pairs()
    log.info("tokenizer: training SentencePiece (large corpora take minutes)")
    with spinner("training SentencePiece", progress), _stage("tokenizer: SentencePiece training"):
        tokenizer = Tokenizer.train(
            src, tgt, vocab_size=data.vocab_size, model_type=data.spm_model_type, joint=data.joint_vocab,
            input_sentences=data.spm_input_sentences, character_coverage=data.character_coverage, seed=seed,
            byte_fallback=data.spm_byte_fallback,
        )  # fmt: skip

    def write(tmp: Path) -> None:
        blobs = tokenizer.to_bytes()
        (tmp / "src.model").write_bytes(blobs["src"])
        if blobs["tgt"] is not None:
            (tmp / "tgt.model").write_bytes(blobs["tgt"])

    _write_atomically(folder, write)
    log.info("tokenizer: %r saved in %s", tokenizer, folder)
    return tokenizer, folder


def _prepare_split(name: str, data: DataConfig, tokenizer: Tokenizer, cache: Path, read: Callable, progress: bool):
    split_config = getattr(data, name)
    settings: dict[str, Any] = {"name": name, "src_lang": data.src_lang, "tgt_lang": data.tgt_lang}
    if name == "train":
        settings.update(max_tokens_per_sentence=data.max_tokens_per_sentence, max_length_ratio=data.max_length_ratio)
    blobs = tokenizer.to_bytes()
    key = _hash(CACHE_VERSION, split_identity(split_config), settings, blobs["src"], blobs["tgt"] or b"")
    folder = cache / f"{name}-{key}"
    if (folder / "meta.json").is_file():
        log.info("%s: cached encoding in %s", name, folder)
        return _load_split(folder), folder
    src, tgt = read(name)
    with _stage(f"{name}: encoding"):
        encoded = _encode(src, tgt, tokenizer, num_proc=data.num_proc, name=name, progress=progress)
    if name == "train":
        with _stage("train: filtering"):
            encoded = filter_pairs(encoded, data)
    else:
        encoded.src_text, encoded.tgt_text = src, tgt
    meta = {"pairs_read": len(src), "pairs": len(encoded), "tokenizer": repr(tokenizer)}
    meta["unknown"] = unknown_share(tokenizer, src, tgt)
    log.info("%s: <unk> would meet %s", name, describe_unknown(meta["unknown"]))
    with _stage(f"{name}: writing the cache"):
        _write_atomically(folder, lambda tmp: _save_split(tmp, encoded, meta))
    log.info("%s: %d pairs encoded into %s", name, len(encoded), folder)
    return _load_split(folder), folder


def prepare_data(
    config: Config, splits: Sequence[str] = SPLITS, progress: bool = True, tokenizer: Tokenizer | None = None
) -> PreparedData:
    """The tokenizer and the encoded `splits` that are configured under `data:`, from the cache when possible.

    tokenizer: use this one (e.g. a checkpoint's) instead of training or loading the cached SentencePiece model;
    then `data.train` need not be configured.
    """
    data = config.data
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise ValueError(f"unknown split(s) {unknown}; choose among {SPLITS}")
    cache = Path(data.cache_dir)
    paths: dict[str, str] = {}
    pairs: dict[str, tuple[list[str], list[str]]] = {}

    def read(name: str) -> tuple[list[str], list[str]]:  # each split is read at most once
        if name not in pairs:
            split = getattr(data, name)
            log.info("%s: reading %s", name, describe_split(split))
            with spinner(f"reading {name}", progress), _stage(f"{name}: reading"):
                pairs[name] = load_pairs(split, data)
        return pairs[name]

    if tokenizer is None:
        if data.train is None:
            raise UserError("data.train is not configured: it is needed to train the SentencePiece vocabulary")
        tokenizer, folder = _prepare_tokenizer(data, cache, lambda: read("train"), progress)
        paths["tokenizer"] = str(folder)
    encoded: dict[str, EncodedSplit] = {}
    for name in (s for s in SPLITS if s in splits and getattr(data, s) is not None):
        encoded[name], folder = _prepare_split(name, data, tokenizer, cache, read, progress)
        paths[name] = str(folder)
    return PreparedData(tokenizer=tokenizer, splits=encoded, cache_paths=paths)
