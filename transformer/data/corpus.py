"""Reading parallel corpora: plain parallel files, TSV files and `datasets` sources, all to the same raw pairs.

One split of `data:` in the config (a `SplitConfig`) is one of

    {src: train.en, tgt: train.de}                     two plain files, one sentence per line, line-aligned
    {tsv: train.tsv.xz, tsv_columns: [1, 2]}           tab-separated (plain, .gz or .xz), source then target column
    {dataset: wmt14, config: de-en, split: train}      a Hugging Face `datasets` source with a `translation` column:
    {dataset: json, data_files: x.jsonl, split: train}   a hub name, a local builder with `data_files`,
    {dataset: path/to/saved, from_disk: true}            or a directory written by `save_to_disk`
    {dataset: json, data_files: x.jsonl, columns: [en, de]}   flat text columns instead of `translation`
    {corpora: [{tsv: a.tsv}, {src: b.en, tgt: b.de, weight: 2}]}   several corpora, concatenated

and `load_pairs` turns any of them into two equally long lists of strings. `SplitConfig.KINDS` names each kind's
fields; `READERS` (at the end) holds each kind's reader, name and local files, and is the only place that
dispatches on the kind. Text files are read here directly
(one bulk read and UTF-8 decode, lines split on "\n" only, each line stripped of surrounding whitespace, no
quoting in TSV), so that errors can name the file and the line; every source then goes through the same
process-parallel encoding in `transformer.data.prepare`. Problems the user can fix raise a one-line `UserError`.
"""

from __future__ import annotations

import contextlib
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
from transformer.errors import UserError
from transformer.fileio import decode_utf8, utf8_lines

log = logging.getLogger(__name__)


def _open_binary(path: Path):
    """A binary file object, decompressing .gz and .xz transparently."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    if path.suffix == ".xz":
        return lzma.open(path, "rb")
    return open(path, "rb")


def _check_file(path: str | Path, what: str) -> Path:
    from transformer.paths import path_base

    if not Path(path).is_file():
        raise UserError(f"{what} not found: {path} ({path_base(path)})")
    return Path(path)


def read_lines(path: str | Path, limit: int | None = None) -> list[str]:
    """The lines of a UTF-8 text file (plain, .gz or .xz), stripped; only the first `limit` lines when given."""
    path = _check_file(path, "data file")
    try:
        with _open_binary(path) as f:
            if limit is None:
                lines = decode_utf8(f.read(), path).split("\n")
                if lines and lines[-1] == "":  # the final newline ends the last line, it does not start a new one
                    lines.pop()
            else:
                lines = list(itertools.islice(utf8_lines(f, path), limit))
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    return [line.strip() for line in lines]


def stream_lines(path: str | Path) -> Iterator[str]:
    """`read_lines`, one line at a time: memory holds one line, not the file. The file is checked at once; a
    read or decoding error is raised when its line is reached."""
    path = _check_file(path, "data file")

    def lines() -> Iterator[str]:
        try:
            with _open_binary(path) as f:
                yield from (line.strip() for line in utf8_lines(f, path))
        except (OSError, EOFError, lzma.LZMAError) as exc:
            raise UserError(f"cannot read {path}: {exc}") from None

    return lines()


def count_lines(path: str | Path) -> int:
    """How many lines `stream_lines` gives, read in blocks (a last line without a newline counts)."""
    path, count, last = _check_file(path, "data file"), 0, b"\n"
    try:
        with _open_binary(path) as f:
            while block := f.read(1 << 20):
                count, last = count + block.count(b"\n"), block[-1:]
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    return count + (last != b"\n")


def _check_not_empty(src: list[str], tgt: list[str], name: str) -> None:
    if not any(src) and not any(tgt):  # no lines, or only blank ones
        raise UserError(f"{name} is empty: no sentence pairs to read")


def _read_parallel(split: SplitConfig) -> tuple[list[str], list[str]]:
    src = read_lines(split.src, split.max_examples)
    tgt = read_lines(split.tgt, split.max_examples)
    if len(src) != len(tgt):
        raise UserError(
            f"parallel files differ in length: {split.src} has {len(src)} lines, {split.tgt} has {len(tgt)}; "
            "they must be line-aligned"
        )
    _check_not_empty(src, tgt, f"{split.src} / {split.tgt}")
    return src, tgt


def _read_tsv(split: SplitConfig) -> tuple[list[str], list[str]]:
    lines = read_lines(split.tsv, split.max_examples)
    _check_not_empty(lines, [], str(split.tsv))
    src_col, tgt_col = split.tsv_columns
    need = max(src_col, tgt_col) + 1
    rows = [line.split("\t") for line in lines]
    for number, row in enumerate(rows, start=1):
        if len(row) < need:
            raise UserError(
                f"{split.tsv} line {number} has {len(row)} tab-separated column(s), but tsv_columns "
                f"{list(split.tsv_columns)} needs {need}; check the file or data.<split>.tsv_columns"
            )
    return [row[src_col].strip() for row in rows], [row[tgt_col].strip() for row in rows]


# ---------------------------------------------------------------------------------------------- `datasets`


def _describe(split: SplitConfig) -> str:
    parts = [split.dataset, split.config, f"split={split.split}"]
    if split.data_files is not None:
        parts.append(f"data_files={split.data_files}")
    return "dataset " + " ".join(str(p) for p in parts if p)


def _local_files(data_files: str | list[str] | None) -> list[Path]:
    """The `data_files` entries that are plain local paths (not globs or URLs), for existence checks and hashing."""
    files = [data_files] if isinstance(data_files, str) else list(data_files or [])
    return [Path(f) for f in files if "://" not in f and not any(c in f for c in "*?[")]


def open_dataset(split: SplitConfig) -> Any:
    """The `datasets.Dataset` named by `split` (hub, local builder with data_files, or `load_from_disk`)."""
    import datasets  # imported lazily: it is slow to import and only this kind of source needs it

    for path in _local_files(split.data_files):
        _check_file(path, "data file")
    try:
        if split.from_disk:
            if not Path(split.dataset).is_dir():
                from transformer.paths import path_base

                raise UserError(
                    f"saved dataset not found: {split.dataset} (a directory written by save_to_disk; "
                    f"{path_base(split.dataset)})"
                )
            ds = datasets.load_from_disk(split.dataset)
            if isinstance(ds, datasets.DatasetDict):
                if split.split not in ds:
                    raise UserError(f"{split.dataset} has splits {sorted(ds)}, not '{split.split}'; set split:")
                ds = ds[split.split]
        elif split.data_files is not None:
            ds = datasets.load_dataset(split.dataset, data_files=split.data_files, split=split.split)
        else:
            with _offline_unless_reachable():
                ds = datasets.load_dataset(split.dataset, split.config, split=split.split)
    except UserError:
        raise
    except Exception as exc:  # hub, network and builder failures come in many types; all are the user's to fix
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise UserError(
            f"could not load {_describe(split)} ({type(exc).__name__}: {first}); offline? download it elsewhere "
            "and use local files: {tsv: ...}, {src: ..., tgt: ...}, {dataset: json, data_files: ...} "
            "or {dataset: DIR, from_disk: true}"
        ) from None
    if isinstance(ds, datasets.DatasetDict):  # load_dataset without a split
        raise UserError(f"{_describe(split)} returned several splits ({sorted(ds)}); set split:")
    return ds


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub's host answers a TCP connection within `timeout` seconds."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def _offline_unless_reachable():
    """Without a network, load as with HF_HUB_OFFLINE=1 (the local cache or one clear failure), not 25 s of retries."""
    import datasets
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or hub_reachable():
        yield
        return
    log.info("the Hugging Face hub is unreachable: loading offline, from the local cache only")
    saved = constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = saved


def _translation_languages(ds: Any, where: str) -> list[str]:
    if "translation" not in ds.column_names:
        raise UserError(f"{where} has no 'translation' column (columns: {', '.join(ds.column_names)})")
    feature = ds.features["translation"]
    languages = getattr(feature, "languages", None)  # datasets.Translation
    if languages is None and isinstance(feature, dict):  # a struct, e.g. read from JSON
        languages = list(feature)
    if languages is None:
        raise UserError(f"{where}: the 'translation' column is not a mapping of language -> text ({feature})")
    return list(languages)


def _first_examples(ds: Any, split: SplitConfig, where: str) -> Any:
    """The dataset's first `split.max_examples` rows (all without it); an empty one is a `UserError`."""
    if split.max_examples is not None:
        ds = ds.select(range(min(split.max_examples, len(ds))))
    if len(ds) == 0:
        raise UserError(f"{where} is empty: no sentence pairs to read")
    return ds


def _read_columns(ds: Any, split: SplitConfig, where: str) -> tuple[list[str], list[str]]:
    """Source and target from two flat text columns (`columns: [source, target]`)."""
    missing = [c for c in split.columns if c not in ds.column_names]
    if missing:
        raise UserError(
            f"{where} has no column {', '.join(map(repr, missing))} (columns: {', '.join(ds.column_names)}); "
            "set columns: [source column, target column]"
        )
    ds = _first_examples(ds, split, where)
    table = ds.select_columns(list(split.columns)).with_format("arrow")[:]
    src, tgt = (table.column(c).to_pylist() for c in split.columns)
    return [str(t or "").strip() for t in src], [str(t or "").strip() for t in tgt]


def _read_dataset(split: SplitConfig, data: DataConfig) -> tuple[list[str], list[str]]:
    ds = open_dataset(split)
    where = _describe(split)
    if split.columns is not None:
        return _read_columns(ds, split, where)
    languages = _translation_languages(ds, where)
    for lang in (data.src_lang, data.tgt_lang):
        if lang not in languages:
            raise UserError(
                f"{where}: language '{lang}' is not in its translation column (it has {', '.join(languages)}); "
                "set data.src_lang and data.tgt_lang to those keys"
            )
    ds = _first_examples(ds, split, where)
    flat = ds.select_columns(["translation"]).flatten().with_format("arrow")  # arrow: 100x faster than rows
    src = [(t or "").strip() for t in flat[f"translation.{data.src_lang}"].to_pylist()]
    tgt = [(t or "").strip() for t in flat[f"translation.{data.tgt_lang}"].to_pylist()]
    return src, tgt


# ---------------------------------------------------------------------------------------------- entry points


def load_pairs(split: SplitConfig, data: DataConfig) -> tuple[list[str], list[str]]:
    """Raw source and target sentences of one split, equally long, each stripped of surrounding whitespace.

    Pairs are kept as they are (empty sides included); filtering happens in `transformer.data.prepare.prepare_data`.
    """
    src, tgt = READERS[split.kind].read(split, data)
    log.debug("read %d pairs from %s", len(src), describe_split(split))
    return src, tgt


def weighted_indices(count: int, weight: float, seed: int) -> np.ndarray:
    """Indices into a corpus of `count` pairs for one epoch: each pair int(weight) times, then a random
    (weight - int(weight)) share of the pairs without replacement, drawn with `seed`, in corpus order."""
    whole = np.tile(np.arange(count), int(weight))
    extra = round((weight - int(weight)) * count)
    sample = np.sort(np.random.default_rng(seed).choice(count, size=extra, replace=False))
    return np.concatenate([whole, sample]).astype(np.int64)


def _read_corpora(split: SplitConfig, data: DataConfig) -> tuple[list[str], list[str]]:
    """Several corpora, concatenated in order, each used `weight` times (OpenNMT-py's corpus weights, static)."""
    src, tgt = [], []
    for number, corpus in enumerate(split.corpora):
        part_src, part_tgt = load_pairs(corpus, data)
        if corpus.weight != 1.0:
            keep = weighted_indices(len(part_src), corpus.weight, seed=number)
            part_src, part_tgt = [part_src[i] for i in keep], [part_tgt[i] for i in keep]
            log.info("%s: weight %g, %d pairs", describe_split(corpus), corpus.weight, len(part_src))
        src += part_src
        tgt += part_tgt
    if split.max_examples is not None:
        src, tgt = src[: split.max_examples], tgt[: split.max_examples]
    return src, tgt


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

    read: Callable[[SplitConfig, DataConfig], tuple[list[str], list[str]]]
    describe: Callable[[SplitConfig], str]
    files: Callable[[SplitConfig], list[str]]


def _dataset_files(split: SplitConfig) -> list[str]:
    return [str(p) for p in _local_files(split.data_files)] + ([split.dataset] if split.from_disk else [])


READERS: dict[str, Reader] = {
    "parallel": Reader(lambda s, _: _read_parallel(s), lambda s: f"{s.src} / {s.tgt}", lambda s: [s.src, s.tgt]),
    "tsv": Reader(
        lambda s, _: _read_tsv(s),
        lambda s: f"{s.tsv} (columns {s.tsv_columns[0]}, {s.tsv_columns[1]})",
        lambda s: [s.tsv],
    ),
    "dataset": Reader(_read_dataset, _describe, _dataset_files),
    "corpora": Reader(_read_corpora, _describe_corpora, lambda s: []),
}
assert READERS.keys() == SplitConfig.KINDS.keys(), "every kind in SplitConfig.KINDS needs a reader here"
