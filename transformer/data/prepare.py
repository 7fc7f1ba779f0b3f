"""Prepared data: the SentencePiece vocabulary and every split encoded once into a memory-mapped cache, streamed.

`prepare_data(config)` (what `transformer-prepare` runs, and what training calls) does, for each configured split:

1. read the raw pairs in chunks (`transformer.data.corpus.stream_pairs`: plain files, TSV or `datasets`);
2. train SentencePiece on a sample of the training pairs (section 5.1: a shared source-target BPE vocabulary):
   `data.spm_input_sentences` non-empty sentences (half from each side when joint), a seeded uniform sample drawn
   in one pass over the corpus when it has no more than that (then: all of them, in order, and that pass's chunks
   are the ones encoded: the corpus is read once), else two (count, then pick); cached in
   `<cache_dir>/tokenizer-<hash>/` keyed by the training data's identity and the settings;
3. encode chunk by chunk (50k pairs) over `data.num_proc` processes, a few chunks in flight; count the characters
   that would meet `<unk>` (`transformer.data.coverage`, numpy over code points);
4. filter the training split only, chunk by chunk (`transformer.data.cleaning`: empty sides, too long, length
   ratio, and optionally copies and duplicates);
5. append each chunk to int32 token and int64 offset arrays in `<cache_dir>/<split>-<hash>/` (`.npy` files, as
   `np.save` writes them), keyed by the split's identity (file path, size and mtime, or the `datasets`
   arguments), the settings that change its encoding and the tokenizer bytes; later calls load them with
   `np.load(mmap_mode="r")` and encode nothing;
6. with `data.subword_sampling`, K sampled copies of the training split beside it (`subword_sampling.py`).

Memory is bounded by the chunk size and the number of processes, not by the corpus: the SentencePiece sample (at
most `spm_input_sentences` sentences; when it is the whole corpus, its chunks are held until encoded, the same
strings) and, with `data.drop_duplicates`, 8 bytes a training pair are the only
exceptions (docs/benchmarks.md has the figures). Cache folders are written under a temporary name and renamed into
place, so an interrupted run never leaves a folder that a later run takes as complete; the next run removes what a
killed one left and starts that split again.

`prepare_tokenizer` and `prepare_split` are the two steps on their own: a split can be encoded with any tokenizer
(a checkpoint's, say) through `prepare_split`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import resource
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from transformer.config import Config, DataConfig
from transformer.data.case_augmentation import training_pairs
from transformer.data.cleaning import PairFilter
from transformer.data.corpus import CHUNK_PAIRS, Pairs, describe_split, load_pairs, split_identity, stream_pairs
from transformer.data.coverage import UnknownCounter, describe_unknown
from transformer.data.encoded import EncodedSplit, SplitWriter, load_split, save_extras, write_atomically
from transformer.data.encoding import Workers, encode_chunks
from transformer.data.subword_sampling import prepare_segmentations
from transformer.data.tokenizer import Tokenizer
from transformer.errors import UserError
from transformer.progress import spinner

__all__ = ["EncodedSplit", "PreparedData", "load_pairs", "prepare_data", "prepare_split", "prepare_tokenizer"]

log = logging.getLogger(__name__)

CACHE_VERSION = 1  # bump when the cache layout or the encoding changes
SPLITS = ("train", "valid", "test")


@dataclass
class PreparedData:
    tokenizer: Tokenizer
    splits: dict[str, EncodedSplit]  # keys among "train", "valid", "test" (those configured)
    cache_paths: dict[str, str] = field(default_factory=dict)  # "tokenizer", each split (and copy) -> its folder
    segmentations: list[EncodedSplit] = field(default_factory=list)  # data.subword_sampling's copies of train

    def train_split(self, epoch: int) -> EncodedSplit:
        """What epoch `epoch` trains on: the sampled copy epoch mod K with data.subword_sampling, else train."""
        return self.segmentations[epoch % len(self.segmentations)] if self.segmentations else self.splits["train"]


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
        what,
        time.perf_counter() - start,
        _peak_rss_gb(resource.RUSAGE_SELF),
        _peak_rss_gb(resource.RUSAGE_CHILDREN),
    )


def _write_split(
    tmp: Path, name: str, data: DataConfig, tokenizer: Tokenizer, workers: Workers, progress: bool, chunks: Iterator
):
    """Encode (and for train, filter) the split `name`, its `chunks` one by one, into the arrays of folder `tmp`."""
    writer, pairs_filter, unknown = (
        SplitWriter(tmp),
        PairFilter(data) if name == "train" else None,
        UnknownCounter(tokenizer),
    )
    texts = None if pairs_filter else ([], [])
    clean = (data.drop_copies, data.drop_duplicates) if pairs_filter else (False, False)
    bar = tqdm(unit="pairs", desc=f"encoding {name}", disable=not progress, dynamic_ncols=True)
    read = 0
    with bar, contextlib.ExitStack() as on_error:
        on_error.callback(writer.abort)
        for (src, tgt), (src_tokens, src_len, tgt_tokens, tgt_len, same, hashes) in encode_chunks(
            chunks, tokenizer, workers=workers, clean=clean
        ):
            read += len(src_len)
            bar.update(len(src_len))
            unknown.add(src, tgt)
            if pairs_filter is None:
                texts[0].extend(src), texts[1].extend(tgt)
            elif not (keep := pairs_filter.keep(src_len, tgt_len + 1, same, hashes)).all():
                src_tokens, tgt_tokens = src_tokens[np.repeat(keep, src_len)], tgt_tokens[np.repeat(keep, tgt_len)]
                src_len, tgt_len = src_len[keep], tgt_len[keep]
            writer.append(src_tokens, src_len, tgt_tokens, tgt_len)
        on_error.pop_all()
    pairs = writer.close()
    dropped = {} if pairs_filter is None else pairs_filter.dropped
    if pairs_filter is not None:
        pairs_filter.report()
        if not pairs:
            raise UserError(
                f"no training pairs left after filtering ({dropped}); check the data, data.max_tokens_per_sentence "
                "and data.max_length_ratio"
            )
    meta = {"pairs_read": read, "pairs": pairs, "tokenizer": repr(tokenizer), "unknown": unknown.report()}
    log.info("%s: <unk> would meet %s", name, describe_unknown(meta["unknown"]))
    save_extras(tmp, meta, dropped, texts)


def _taken(held: list[Pairs]) -> Iterator[Pairs]:
    """The chunks of `held` in order, each let go of as it is taken."""
    held.reverse()
    while held:
        yield held.pop()


def drop_longer(split: EncodedSplit, limit: int, name: str) -> EncodedSplit:
    """An evaluation split without the pairs whose source or target exceeds `limit` tokens (`model.max_positions`),
    which the model cannot take; the count goes to the log and `dropped["too_long_for_model"]`."""
    keep = (split.src_lengths <= limit) & (split.tgt_lengths <= limit)
    if keep.all():
        return split
    log.warning(
        "%s: left out %d of %d pairs longer than model.max_positions (%d tokens)",
        name,
        int((~keep).sum()),
        len(keep),
        limit,
    )
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


def sample_sentences(
    chunks: Callable[[], Iterator[Pairs]], per_side: int, seed: int, held: list[Pairs] | None = None
) -> Pairs:
    """A seeded uniform sample of `per_side` non-empty sentences of each side, in corpus order (0: all of them).

    One pass keeps the first `per_side` of each side; when a side has more, a second pass picks a uniform sample
    of its sentences (`uniform_indices`). Memory holds the sample, never the corpus. A corpus with at most
    `per_side` non-empty sentences a side gives every one of them, as the in-memory sampling before it did; then
    `held`, when given, receives its chunks (the sample's strings, so a pointer a sentence more), so that encoding
    need not read it again: one read fewer, 1-2% of the time at 1M pairs (docs/benchmarks.md, "The data path at
    WMT scale, streamed").
    """
    kept: list[list[str]] = [[], []]
    counts = [0, 0]
    for pair in chunks():
        for side, texts in enumerate(pair):
            nonempty = list(filter(None, texts))
            counts[side] += len(nonempty)
            if per_side <= 0 or counts[side] <= per_side:
                kept[side] += nonempty
        if held is not None and per_side > 0 and max(counts) > per_side:
            held.clear()  # more than the sample: encoding reads the corpus again
            held = None
        elif held is not None:
            held.append(pair)
    over = [per_side > 0 and n > per_side for n in counts]
    if not any(over):
        return kept[0], kept[1]
    rng = np.random.default_rng(seed)
    picks = [uniform_indices(n, per_side, rng) if big else None for n, big in zip(counts, over)]
    kept, seen = [kept[0] if not over[0] else [], kept[1] if not over[1] else []], [0, 0]
    for pair in chunks():
        for side, texts in enumerate(pair):
            if over[side]:
                nonempty = [t for t in texts if t]
                first, last = np.searchsorted(picks[side], [seen[side], seen[side] + len(nonempty)])
                kept[side] += [nonempty[i - seen[side]] for i in picks[side][first:last]]
                seen[side] += len(nonempty)
    return kept[0], kept[1]


def uniform_indices(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """(k,) sorted int64: k distinct indices in [0, n) drawn uniformly, every k-subset equally likely, in O(k) memory
    and a bounded number of passes.

    Up to half of [0, n): the first k distinct values of a stream of uniform draws; each pass draws what is missing,
    scaled up by the share of values still free, so the passes stay few (about two) however close k is to n / 2.
    Past half: the complement, n - k indices drawn the same way, is left out (a uniform (n - k)-subset left out is a
    uniform k-subset kept), so k = n - 1 costs one draw, not a search for the last free values.
    """
    if not 0 <= k <= n:
        raise ValueError(f"cannot draw {k} distinct indices from {n}")
    if 2 * k > n:
        left_out = uniform_indices(n, n - k, rng)
        keep = np.ones(n, dtype=bool)
        keep[left_out] = False
        return np.flatnonzero(keep).astype(np.int64)
    chosen = np.empty(0, dtype=np.int64)
    while len(chosen) < k:
        missing, free = k - len(chosen), n - len(chosen)
        draws = np.concatenate([chosen, rng.integers(0, n, size=missing * 11 * n // (10 * free) + 16)])
        _, first = np.unique(draws, return_index=True)
        chosen = draws[np.sort(first)][:k]
    return np.sort(chosen)


def _tokenizer_key(data: DataConfig, seed: int) -> str:
    settings = {k: getattr(data, k) for k in ("src_lang", "tgt_lang", "vocab_size", "spm_model_type", "joint_vocab")}
    settings.update(spm_input_sentences=data.spm_input_sentences, character_coverage=data.character_coverage)
    if data.spm_input_sentences > 0:  # the streamed sample differs from the earlier in-memory one above that size
        settings["sample"] = "streamed"
    if data.spm_byte_fallback:  # only when on, so the keys of existing caches stay as they were
        settings.update(spm_byte_fallback=True)
    if data.case_augmentation:  # likewise; the sample's copies come from `seed`, not train.seed
        settings.update(case_augmentation=data.case_augmentation)
    return _hash(CACHE_VERSION, split_identity(data.train), settings, seed)


def _write_models(folder: Path, tokenizer: Tokenizer) -> None:
    blobs = tokenizer.to_bytes()
    (folder / "src.model").write_bytes(blobs["src"])
    if blobs["tgt"] is not None:
        (folder / "tgt.model").write_bytes(blobs["tgt"])


def prepare_tokenizer(
    data: DataConfig,
    cache: Path,
    progress: bool = True,
    workers: Workers | None = None,
    held: list[Pairs] | None = None,
) -> tuple[Tokenizer, Path]:
    """The SentencePiece tokenizer of `data` (trained on a sample of `data.train`) and its cache folder. workers:
    encoding processes to start before SentencePiece grows this process (forked after it, they would share it).
    held: receives the training chunks when the sample holds every sentence (`sample_sentences`)."""
    if data.train is None:
        raise UserError("data.train is not configured: it is needed to train the SentencePiece vocabulary")
    seed = 1  # the vocabulary does not depend on train.seed, so runs with different seeds share it
    folder = cache / f"tokenizer-{_tokenizer_key(data, seed)}"
    if (folder / "src.model").is_file():
        log.info("tokenizer: cached in %s", folder)
        tgt = folder / "tgt.model"
        return Tokenizer((folder / "src.model").read_bytes(), tgt.read_bytes() if tgt.is_file() else None), folder
    if workers is not None:
        workers.start()
    per_side = data.spm_input_sentences // (2 if data.joint_vocab else 1)
    log.info("train: sampling sentences for SentencePiece from %s", describe_split(data.train))
    with spinner("sampling sentences for SentencePiece", progress), _stage("tokenizer: sampling"):
        src, tgt = sample_sentences(lambda: training_pairs(data, seed, CHUNK_PAIRS), per_side, seed, held)
    log.info("tokenizer: training SentencePiece (large corpora take minutes)")
    with spinner("training SentencePiece", progress), _stage("tokenizer: SentencePiece training"):
        tokenizer = Tokenizer.train(
            src,
            tgt,
            vocab_size=data.vocab_size,
            model_type=data.spm_model_type,
            joint=data.joint_vocab,
            input_sentences=0,
            character_coverage=data.character_coverage,
            seed=seed,
            byte_fallback=data.spm_byte_fallback,
        )
    del src, tgt
    write_atomically(folder, lambda tmp: _write_models(tmp, tokenizer))
    log.info("tokenizer: %r saved in %s", tokenizer, folder)
    return tokenizer, folder


def _split_key(name: str, data: DataConfig, tokenizer: Tokenizer, seed: int) -> str:
    """The cache key of split `name`: its identity, the settings that change its encoding, the tokenizer (and for
    the training split with data.case_augmentation, `seed`, which draws its copies)."""
    settings: dict[str, Any] = {"name": name, "src_lang": data.src_lang, "tgt_lang": data.tgt_lang}
    if name == "train":
        settings.update(max_tokens_per_sentence=data.max_tokens_per_sentence, max_length_ratio=data.max_length_ratio)
        settings.update({k: True for k in ("drop_copies", "drop_duplicates") if getattr(data, k)})
        if data.case_augmentation:  # only when on, so the keys of existing caches stay as they were
            settings.update(case_augmentation=data.case_augmentation, case_seed=seed)
    blobs = tokenizer.to_bytes()
    return _hash(CACHE_VERSION, split_identity(getattr(data, name)), settings, blobs["src"], blobs["tgt"] or b"")


def sampled_folders(data: DataConfig, seed: int, tokenizer: Tokenizer, cache: Path) -> list[Path]:
    """The cache folders of data.subword_sampling's copies of the training split (`subword_sampling.py`): keyed by
    the split's key, alpha, the seed and the copy's number (so a larger K keeps the copies it has)."""
    key, alpha = _split_key("train", data, tokenizer, seed), data.subword_sampling.alpha
    return [cache / f"train-sampled-{_hash(key, alpha, seed, k)}" for k in range(data.subword_sampling.segmentations)]


def prepare_split(
    name: str,
    data: DataConfig,
    tokenizer: Tokenizer,
    cache: Path,
    progress: bool = True,
    workers: Workers | None = None,
    chunks: Iterator[Pairs] | None = None,
    seed: int = 1,
) -> tuple[EncodedSplit, Path]:
    """The split `name` ("train", "valid" or "test") of `data` encoded with `tokenizer` (any: trained here or a
    checkpoint's), from its cache folder when there is one, else streamed into it over `workers` (by default
    `data.num_proc` processes of its own); and that folder. chunks: the split's pairs when already read (else
    `stream_pairs` reads them; for train, `training_pairs` with data.case_augmentation's copies from `seed`)."""
    split_config = getattr(data, name)
    folder = cache / f"{name}-{_split_key(name, data, tokenizer, seed)}"
    if (folder / "meta.json").is_file():
        log.info("%s: cached encoding in %s", name, folder)
        return load_split(folder), folder
    log.info("%s: reading and encoding %s", name, describe_split(split_config))
    with _stage(f"{name}: reading, encoding and writing the cache"), contextlib.ExitStack() as own:
        workers = workers or own.enter_context(Workers(data.num_proc))
        if chunks is None:
            train = name == "train"
            chunks = training_pairs(data, seed, CHUNK_PAIRS) if train else stream_pairs(split_config, data, CHUNK_PAIRS)
        write_atomically(folder, lambda tmp: _write_split(tmp, name, data, tokenizer, workers, progress, chunks))
    split = load_split(folder)
    log.info("%s: %d pairs encoded into %s", name, len(split), folder)
    return split, folder


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
    encoded: dict[str, EncodedSplit] = {}
    # the training pairs, when the SentencePiece sample's pass could keep them all (not with case copies: the
    # sample's are drawn from the tokenizer's seed, training's from train.seed)
    held: list[Pairs] | None = None if data.case_augmentation else []
    with _stage("prepare: all of it"), Workers(data.num_proc) as workers:
        if tokenizer is None:
            tokenizer, folder = prepare_tokenizer(data, cache, progress, workers, held)
            paths["tokenizer"] = str(folder)
        for name in (s for s in SPLITS if s in splits and getattr(data, s) is not None):
            chunks = _taken(held) if name == "train" and held else None
            seed = config.train.seed
            encoded[name], folder = prepare_split(name, data, tokenizer, cache, progress, workers, chunks, seed)
            paths[name] = str(folder)
        copies = []
        if data.subword_sampling is not None and "train" in encoded:
            folders = sampled_folders(data, config.train.seed, tokenizer, cache)
            copies = prepare_segmentations(folders, data, config.train.seed, tokenizer, workers)
            paths.update({f"train_sampled_{k}": str(folder) for k, folder in enumerate(folders)})
    return PreparedData(tokenizer=tokenizer, splits=encoded, cache_paths=paths, segmentations=copies)
