"""Reading parallel corpora: plain parallel files, TSV files and `datasets` sources, all to the same raw pairs.

One split of `data:` in the config (a `SplitConfig`) is one of

    {src: train.en, tgt: train.de}                     two plain files, one sentence per line, line-aligned
    {tsv: train.tsv.xz, tsv_columns: [1, 2]}           tab-separated (plain, .gz or .xz), source then target column
    {dataset: wmt14, config: de-en, split: train}      a Hugging Face `datasets` source with a `translation` column:
    {dataset: json, data_files: x.jsonl, split: train}   a hub name, a local builder with `data_files`,
    {dataset: path/to/saved, from_disk: true}            or a directory written by `save_to_disk`
    {dataset: json, data_files: x.jsonl, columns: [en, de]}   flat text columns instead of `translation`
    {corpora: [{tsv: a.tsv}, {src: b.en, tgt: b.de, weight: 2}]}   several corpora, concatenated

and `stream_pairs` turns any of them into chunks of pairs (two equally long lists of strings; memory holds a chunk,
never the corpus), `load_pairs` into one pair of lists. `SplitConfig.KINDS` names each kind's fields; `READERS` (at
the end) holds each kind's reader, name and local files, and is the only place that dispatches on the kind. Text
files are read here directly (in blocks of whole lines, each decoded at once, lines split on "\n" only, each line
stripped of surrounding whitespace, no quoting in TSV), so that errors can name the file and the line; `datasets`
sources are read by `transformer.data.datasets_source`. Every source then goes through the same process-parallel
encoding in `transformer.data.prepare`. Problems the user can fix raise a one-line `UserError`.
"""

from __future__ import annotations

import gzip
import itertools
import logging
import lzma
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from transformer.config import DataConfig, SplitConfig
from transformer.data.datasets_source import dataset_files, describe_dataset, read_dataset
from transformer.errors import UserError
from transformer.fileio import decode_utf8, utf8_lines
from transformer.paths import check_file

log = logging.getLogger(__name__)


def _open_binary(path: Path):
    """A binary file object, decompressing .gz and .xz transparently."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    if path.suffix == ".xz":
        return lzma.open(path, "rb")
    return open(path, "rb")


BLOCK_BYTES = 1 << 20  # bytes read (and decoded) at a time from a text file
CHUNK_PAIRS = 50_000  # pairs per chunk that `stream_pairs` yields (and `transformer-prepare` encodes as one task)
Pairs = tuple[list[str], list[str]]  # (sources, targets), equally long


def _line_blocks(path: Path) -> Iterator[list[str]]:
    """The stripped lines of a text file, a block of whole lines at a time: each block of BLOCK_BYTES is cut after
    its last newline and decoded at once (lines split on "\n" only, as a bulk read would)."""
    rest, line, offset = b"", 1, 0
    try:
        with _open_binary(path) as f:
            while block := f.read(BLOCK_BYTES):
                head, cut, rest = (rest + block).rpartition(b"\n")
                if not cut:  # no newline yet: a line longer than a block
                    continue
                lines = decode_utf8(head, path, first_line=line, first_byte=offset).split("\n")
                yield [text.strip() for text in lines]
                line, offset = line + len(lines), offset + len(head) + 1
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    if rest:  # a last line without a newline
        yield [decode_utf8(rest, path, first_line=line, first_byte=offset).strip()]


def stream_lines(path: str | Path) -> Iterator[str]:
    """The stripped lines of a UTF-8 text file (plain, .gz or .xz), one at a time: memory holds one line, not the
    file (what translate and evaluate read). The file is checked at once; a read or decoding error is raised when
    its line is reached."""
    path = check_file(path, "data file")

    def lines() -> Iterator[str]:
        try:
            with _open_binary(path) as f:
                yield from (line.strip() for line in utf8_lines(f, path))
        except (OSError, EOFError, lzma.LZMAError) as exc:
            raise UserError(f"cannot read {path}: {exc}") from None

    return lines()


def block_lines(path: str | Path) -> Iterator[str]:
    """`stream_lines`' lines, a block (BLOCK_BYTES) at a time: memory holds a block; 1.7-1.9x faster than
    `stream_lines` on 1M lines (docs/benchmarks.md, "The data path at WMT scale, streamed")."""
    return itertools.chain.from_iterable(_line_blocks(check_file(path, "data file")))


def read_lines(path: str | Path, limit: int | None = None) -> list[str]:
    """The lines of a UTF-8 text file (plain, .gz or .xz), stripped; only the first `limit` lines when given."""
    return list(itertools.islice(block_lines(path), limit))


def count_lines(path: str | Path) -> int:
    """How many lines `stream_lines` gives, read in blocks (a last line without a newline counts)."""
    path, count, last = check_file(path, "data file"), 0, b"\n"
    try:
        with _open_binary(path) as f:
            while block := f.read(1 << 20):
                count, last = count + block.count(b"\n"), block[-1:]
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    return count + (last != b"\n")


def _rechunk(blocks: Iterator[list[str]], size: int, limit: int | None) -> Iterator[list[str]]:
    """The lines of `blocks` (only the first `limit` when given) in lists of `size` lines, the last one shorter:
    whole lists sliced, never a line at a time (1.5x faster than zipping the lines of two files one by one,
    docs/benchmarks.md, "The data path at WMT scale, streamed")."""
    chunk: list[str] = []
    for block in blocks:
        if limit is not None:  # lines still to take
            block, limit = block[:limit], limit - min(limit, len(block))
        chunk += block
        while len(chunk) >= size:
            yield chunk[:size]
            chunk = chunk[size:]
        if limit == 0:
            break
    if chunk:
        yield chunk


def _read_parallel(split: SplitConfig, size: int) -> Iterator[Pairs]:
    paths = (split.src, split.tgt)
    sides = [_rechunk(_line_blocks(check_file(path, "data file")), size, split.max_examples) for path in paths]
    counts, text = [0, 0], False
    for sources, targets in itertools.zip_longest(*sides, fillvalue=[]):
        counts = [counts[0] + len(sources), counts[1] + len(targets)]
        if len(sources) != len(targets):  # one file ended first: count the other's remaining lines
            counts = [n + sum(map(len, rest)) for n, rest in zip(counts, sides)]
            raise UserError(
                f"parallel files differ in length: {split.src} has {counts[0]} lines, {split.tgt} has {counts[1]}; "
                "they must be line-aligned"
            )
        text = text or any(sources) or any(targets)
        yield sources, targets
    if not text:  # no lines, or only blank ones
        raise UserError(f"{split.src} / {split.tgt} is empty: no sentence pairs to read")


def _read_tsv(split: SplitConfig, size: int) -> Iterator[Pairs]:
    chunks = _rechunk(_line_blocks(check_file(split.tsv, "data file")), size, split.max_examples)
    src_col, tgt_col = split.tsv_columns
    need, number, text = max(src_col, tgt_col) + 1, 0, False
    for chunk in chunks:
        rows = [line.split("\t") for line in chunk]
        short = next((i for i, row in enumerate(rows) if len(row) < need), None)
        text = text or any(chunk[: short if short is not None else len(chunk)])
        if short is not None and (text or any(chunk) or any(map(any, chunks))):  # only blank lines: the file is empty
            raise UserError(
                f"{split.tsv} line {number + short + 1} has {len(rows[short])} tab-separated column(s), but "
                f"tsv_columns {list(split.tsv_columns)} needs {need}; check the file or data.<split>.tsv_columns"
            )
        number += len(chunk)
        if short is None:
            yield [row[src_col].strip() for row in rows], [row[tgt_col].strip() for row in rows]
    if not text:
        raise UserError(f"{split.tsv} is empty: no sentence pairs to read")


# ---------------------------------------------------------------------------------------------- entry points


def stream_pairs(split: SplitConfig, data: DataConfig, size: int = CHUNK_PAIRS) -> Iterator[Pairs]:
    """The raw pairs of one split in chunks of at most `size` pairs (source and target sentences, equally many,
    each stripped of surrounding whitespace): memory holds a chunk, never the corpus. The source is checked when
    the first chunk is asked for; an error that needs the whole source (files of different lengths) comes at its end.

    Pairs are kept as they are (empty sides included); filtering happens in `transformer.data.prepare.prepare_data`.
    """
    return READERS[split.kind].chunks(split, data, size)


def load_pairs(split: SplitConfig, data: DataConfig) -> Pairs:
    """All the raw pairs of one split as two lists (`stream_pairs`, concatenated): for evaluation sets."""
    src, tgt = [], []
    for chunk_src, chunk_tgt in stream_pairs(split, data):
        src += chunk_src
        tgt += chunk_tgt
    log.debug("read %d pairs from %s", len(src), describe_split(split))
    return src, tgt


def weighted_sample(count: int, weight: float, seed: int) -> np.ndarray:
    """The sorted indices of the (weight - int(weight)) share of a corpus of `count` pairs drawn for one epoch,
    without replacement, with `seed`. Memory: numpy's `choice` shuffles a table of all `count` indices (8 bytes a
    pair of the corpus) once the share is over 1/50 of it, else uses Floyd's algorithm (a few times 8 bytes an index
    drawn); either way one int64 array of the result."""
    extra = round((weight - int(weight)) * count)
    return np.sort(np.random.default_rng(seed).choice(count, size=extra, replace=False))


def weighted_indices(count: int, weight: float, seed: int) -> np.ndarray:
    """Indices into a corpus of `count` pairs for one epoch: each pair int(weight) times, then the
    `weighted_sample`, in corpus order."""
    whole = np.tile(np.arange(count), int(weight))
    return np.concatenate([whole, weighted_sample(count, weight, seed)]).astype(np.int64)


def _weighted(corpus: SplitConfig, data: DataConfig, seed: int, size: int) -> Iterator[Pairs]:
    """One corpus of a `corpora:` list used `weight` times: int(weight) passes over it, then a pass that keeps the
    `weighted_sample` (a first pass counts its pairs)."""
    if corpus.weight == 1.0:
        yield from stream_pairs(corpus, data, size)
        return
    count = sum(len(src) for src, _ in stream_pairs(corpus, data, size))
    sample = weighted_sample(count, corpus.weight, seed)
    log.info("%s: weight %g, %d pairs", describe_split(corpus), corpus.weight, count * int(corpus.weight) + len(sample))
    for _ in range(int(corpus.weight)):
        yield from stream_pairs(corpus, data, size)
    start = 0
    for src, tgt in stream_pairs(corpus, data, size):
        picked = sample[np.searchsorted(sample, start) : np.searchsorted(sample, start + len(src))] - start
        start += len(src)
        if len(picked):
            yield [src[i] for i in picked], [tgt[i] for i in picked]


def _read_corpora(split: SplitConfig, data: DataConfig, size: int) -> Iterator[Pairs]:
    """Several corpora, concatenated in order, each used `weight` times (OpenNMT-py's corpus weights, static)."""
    left = split.max_examples
    for number, corpus in enumerate(split.corpora):
        for src, tgt in _weighted(corpus, data, number, size):
            if left is not None:
                src, tgt, left = src[:left], tgt[:left], left - min(left, len(src))
            if src:
                yield src, tgt
            if left == 0:
                return


def describe_split(split: SplitConfig) -> str:
    """A short human name for a split's source: its files, its dataset, or its corpora."""
    return READERS[split.kind].describe(split)


def _describe_corpora(split: SplitConfig) -> str:
    weights = [f" (weight {c.weight:g})" if c.weight != 1 else "" for c in split.corpora]
    return " + ".join(describe_split(c) + weight for c, weight in zip(split.corpora, weights))


def input_files(split: SplitConfig) -> list[str]:
    """Every local file or folder a split reads (its corpora's included): inputs no command may write over."""
    return READERS[split.kind].files(split) + [f for c in split.corpora or [] for f in input_files(c)]


def split_identity(split: SplitConfig) -> dict[str, Any]:
    """What identifies a split's content for the cache key: its settings plus path, size and mtime of its files."""

    def stat(path: str | Path) -> list[Any]:
        path = Path(path)
        if path.is_dir():
            return [[str(p.relative_to(path)), *stat(p)[1:]] for p in sorted(path.rglob("*")) if p.is_file()]
        info = os.stat(path) if path.exists() else None
        return [str(path.resolve()), info and info.st_size, info and info.st_mtime_ns]

    identity: dict[str, Any] = {k: v for k, v in vars(split).items()}
    identity["tsv_columns"] = list(split.tsv_columns)
    if split.corpora:
        identity["corpora"] = [split_identity(c) for c in split.corpora]
    identity["files"] = [stat(f) for f in READERS[split.kind].files(split)]
    return identity


# ---------------------------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Reader:
    """One kind of source (a key of `SplitConfig.KINDS`, which names its fields): how to read its pairs, how to
    name it, and the local files it reads itself (they key the cache; no command may write over them)."""

    chunks: Callable[[SplitConfig, DataConfig, int], Iterator[Pairs]]  # (split, data, chunk size) -> chunks
    describe: Callable[[SplitConfig], str]
    files: Callable[[SplitConfig], list[str]]


READERS: dict[str, Reader] = {
    "parallel": Reader(
        lambda s, _, size: _read_parallel(s, size), lambda s: f"{s.src} / {s.tgt}", lambda s: [s.src, s.tgt]
    ),
    "tsv": Reader(
        lambda s, _, size: _read_tsv(s, size),
        lambda s: f"{s.tsv} (columns {s.tsv_columns[0]}, {s.tsv_columns[1]})",
        lambda s: [s.tsv],
    ),
    "dataset": Reader(read_dataset, describe_dataset, dataset_files),
    "corpora": Reader(_read_corpora, _describe_corpora, lambda s: []),
}
assert READERS.keys() == SplitConfig.KINDS.keys(), "every kind in SplitConfig.KINDS needs a reader here"
