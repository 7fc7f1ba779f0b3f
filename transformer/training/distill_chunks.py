"""The teacher's translation of a corpus in chunks: resumable after a kill, sharded over processes, memory bounded.

The source (a split's pairs, streamed: `data.corpus.stream_pairs`) is cut into chunks of `chunk_lines` pairs,
numbered from 0 in corpus order. Of W processes (torchrun), rank r translates chunks r, r + W, r + 2W, ...; each
chunk is written whole as `chunks/<k>.tsv` (k with five digits or more) through an atomic rename, so a chunk file
exists complete or not at all. A rerun, with any number of processes, translates only the chunks whose files are
missing: a kill costs the chunks in flight; a process killed mid-write leaves a temporary file
(`.<name>.<PID>@<host>.*.tmp`), which the next run removes. When every chunk exists, rank 0 concatenates them in
order into `teacher.tsv`. Memory holds one chunk (and the source reader's block), never the corpus.

Determinism: a chunk is handed to the translator whole (`chunk_lines` = its size), which sorts it into batches by
length, so a chunk's output depends only on its lines, the teacher and the decoding settings, never on which rank
translates it or when: the merged corpus is byte-identical whatever the kills and the number of processes, for one
device type and thread count (a matrix product's sums may be split otherwise on another, and a near tie in the
beam turn). `manifest.json` records what the chunks were made from; a rerun with another teacher, source, decoding
settings or chunk size is refused rather than mixed.

A row of a chunk (and of teacher.tsv), tab-separated: the source, the teacher's output, the original target, the
teacher's log-probability per piece (log P(output + EOS) / (output pieces + 1), 4 decimals; 0 for an empty line).
Tabs inside a source or target (possible in plain parallel files) become spaces; an output holds none.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from transformer.errors import UserError
from transformer.fileio import atomic_output, remove_stale_temporaries, write_text

MANIFEST = "manifest.json"


def chunk_path(folder: Path, index: int) -> Path:
    """Chunk `index`'s file in `folder`: 00000.tsv, 00001.tsv, ..."""
    return folder / f"{index:05d}.tsv"


def check_manifest(folder: Path, identity: dict[str, Any]) -> None:
    """Record `identity` (what the chunks are made from) in folder/manifest.json, or refuse a folder whose chunks
    were made from something else (naming what differs). Every rank may write it: the same bytes, atomically."""
    path = folder / MANIFEST
    identity = json.loads(json.dumps(identity))  # tuples as lists, as read back
    if path.is_file():
        stored = json.loads(path.read_text(encoding="utf-8"))
        differ = [key for key in sorted(identity.keys() | stored.keys()) if identity.get(key) != stored.get(key)]
        if differ:
            raise UserError(
                f"{folder} holds chunks of another translation ({', '.join(differ)} differ); rerun with the same "
                f"teacher, source, decoding settings and --chunk-lines, or remove {folder} (or use another --out)"
            )
        return
    folder.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(identity, indent=2, sort_keys=True) + "\n")


def row(source: str, output: str, target: str, log_prob: float, pieces: int) -> str:
    """One line of a chunk: source, output, original target, log-probability per piece (see the module docstring)."""
    per_piece = log_prob / (pieces + 1)
    fields = (source.replace("\t", " "), output, target.replace("\t", " "), f"{per_piece:.4f}")
    return "\t".join(fields) + "\n"


def translate_chunk(translate: Callable, sources: list[str], targets: list[str], progress: Callable) -> list[str]:
    """The rows of one chunk; `translate` is `decoding.streaming.StreamingEngine.translate`, handed the chunk whole."""
    results = translate(sources, chunk_lines=max(1, len(sources)), progress=progress)
    rows = []
    for source, target, hypotheses in zip(sources, targets, results):
        best = hypotheses[0]
        rows.append(row(source, best.text, target, best.log_prob, len(best.tokens)))
    return rows


def translate_chunks(
    translate: Callable,
    chunks: Iterable[tuple[list[str], list[str]]],
    folder: Path,
    *,
    rank: int = 0,
    world: int = 1,
    progress: Callable[[int], Any] = lambda n: None,
) -> tuple[int, int]:
    """Translate this rank's missing chunks of `chunks` (pairs in chunks, in corpus order) into `folder`; returns
    (chunks in the corpus, chunks translated here). The lines of the chunks skipped are not counted in `progress`."""
    folder.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(folder)  # those of killed writers; a live rank's are kept
    count = translated = 0
    for index, (sources, targets) in enumerate(chunks):
        count = index + 1
        path = chunk_path(folder, index)
        if index % world != rank or path.is_file():
            continue
        rows = translate_chunk(translate, sources, targets, progress)
        with atomic_output(path) as f:
            f.writelines(rows)
        translated += 1
    return count, translated


def missing_chunks(folder: Path, count: int) -> list[int]:
    """The indices of the first `count` chunks with no file in `folder`."""
    return [index for index in range(count) if not chunk_path(folder, index).is_file()]


def merge_chunks(folder: Path, count: int, output: Path) -> int:
    """Concatenate chunks 0..count-1 of `folder`, in order, into `output` (atomically, streamed); returns the rows.
    A missing chunk is a `UserError` (a rank that failed): a rerun translates it."""
    missing = missing_chunks(folder, count)
    if missing:
        shown = ", ".join(chunk_path(folder, i).name for i in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise UserError(
            f"{len(missing)} of {count} chunks are missing ({shown}): a process stopped before translating them; "
            "rerun the translate stage to translate only those"
        )
    rows = 0
    with atomic_output(output, "wb") as out:
        for index in range(count):
            with open(chunk_path(folder, index), "rb") as f:
                while block := f.read(1 << 20):
                    out.write(block)
                    rows += block.count(b"\n")
    return rows


def lines_to_do(total: int | None, chunk_lines: int, folder: Path, *, rank: int, world: int) -> tuple[int | None, int]:
    """(this rank's lines, those already translated) of a corpus of `total` pairs cut into chunks of `chunk_lines`
    (None, 0 when the total is unknown): the progress bar's total and start."""
    if total is None:
        return None, 0
    mine = [(k, min(chunk_lines, total - k * chunk_lines)) for k in range(rank, -(-total // chunk_lines), world)]
    done = sum(n for k, n in mine if chunk_path(folder, k).is_file())
    return sum(n for _, n in mine), done
