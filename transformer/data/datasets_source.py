"""The `datasets` kind of source: a Hugging Face hub name, a local builder with `data_files`, or a directory written
by `save_to_disk`, read from its memory-mapped Arrow table in batches (`transformer.data.corpus` dispatches here).

Pairs come from a `translation` column (a mapping of language -> text, as WMT14's) or from two flat text columns
(`columns: [source, target]`). Without a network the hub is read offline at once, from the local cache.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transformer.config import DataConfig, SplitConfig
from transformer.errors import UserError
from transformer.paths import check_file

log = logging.getLogger(__name__)
Pairs = tuple[list[str], list[str]]  # (sources, targets), equally long


def describe_dataset(split: SplitConfig) -> str:
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
        check_file(path, "data file")
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
            f"could not load {describe_dataset(split)} ({type(exc).__name__}: {first}); offline? download it elsewhere "
            "and use local files: {tsv: ...}, {src: ..., tgt: ...}, {dataset: json, data_files: ...} "
            "or {dataset: DIR, from_disk: true}"
        ) from None
    if isinstance(ds, datasets.DatasetDict):  # load_dataset without a split
        raise UserError(f"{describe_dataset(split)} returned several splits ({sorted(ds)}); set split:")
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


def _arrow_batches(ds: Any, columns: list[str], split: SplitConfig, where: str, size: int) -> Iterator[Any]:
    """The dataset's first `split.max_examples` rows (all without it) of `columns`, as Arrow tables of at most
    `size` rows, read from the memory-mapped table batch by batch (never a Python list of a whole column)."""
    left = len(ds) if split.max_examples is None else min(split.max_examples, len(ds))
    if left == 0:
        raise UserError(f"{where} is empty: no sentence pairs to read")
    for batch in ds.select_columns(columns).with_format("arrow").iter(batch_size=size):
        yield batch.slice(0, left)
        left -= min(left, batch.num_rows)
        if not left:
            return


def _read_columns(ds: Any, split: SplitConfig, where: str, size: int) -> Iterator[Pairs]:
    """Source and target from two flat text columns (`columns: [source, target]`)."""
    missing = [c for c in split.columns if c not in ds.column_names]
    if missing:
        raise UserError(
            f"{where} has no column {', '.join(map(repr, missing))} (columns: {', '.join(ds.column_names)}); "
            "set columns: [source column, target column]"
        )
    for batch in _arrow_batches(ds, list(split.columns), split, where, size):
        src, tgt = (batch.column(c).to_pylist() for c in split.columns)
        yield [str(t or "").strip() for t in src], [str(t or "").strip() for t in tgt]


def read_dataset(split: SplitConfig, data: DataConfig, size: int) -> Iterator[Pairs]:
    import pyarrow.compute as pc

    ds = open_dataset(split)
    where = describe_dataset(split)
    if split.columns is not None:
        yield from _read_columns(ds, split, where, size)
        return
    languages = _translation_languages(ds, where)
    for lang in (data.src_lang, data.tgt_lang):
        if lang not in languages:
            raise UserError(
                f"{where}: language '{lang}' is not in its translation column (it has {', '.join(languages)}); "
                "set data.src_lang and data.tgt_lang to those keys"
            )
    for batch in _arrow_batches(ds, ["translation"], split, where, size):
        column = batch.column("translation")
        src, tgt = (pc.struct_field(column, lang).to_pylist() for lang in (data.src_lang, data.tgt_lang))
        yield [(t or "").strip() for t in src], [(t or "").strip() for t in tgt]


def dataset_files(split: SplitConfig) -> list[str]:
    return [str(p) for p in _local_files(split.data_files)] + ([split.dataset] if split.from_disk else [])
