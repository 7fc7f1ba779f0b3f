"""Encoding raw pairs into token arrays, chunk by chunk, over a pool of worker processes.

`Workers` is the pool: `data.num_proc` processes forked once (before SentencePiece trains, so that they do not
share its memory), reused by every split. `encode_chunks` sends them chunks of pairs, at most 2 per process in
flight, and gives the results back in order: memory holds a few chunks, never the corpus. A task carries the
tokenizer's model bytes (a few hundred kB against a chunk's megabytes of text); each worker loads a tokenizer once.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import multiprocessing
from collections.abc import Iterator

import numpy as np

from transformer.data.cleaning import pair_hashes
from transformer.data.corpus import Pairs
from transformer.data.tokenizer import Tokenizer

IN_FLIGHT = 2  # chunks submitted per worker process before the oldest result is taken
_loaded: dict[str, Tokenizer] = {}  # in a worker process: the tokenizer last sent, by the digest of its bytes


def _pack(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Ragged Python rows -> (flat int32 tokens, int64 lengths)."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32, count=int(lengths.sum()))
    return flat, lengths


def encode_chunk(
    src: list[str], tgt: list[str], clean: tuple[bool, bool], tokenizer: Tokenizer | tuple, sampling=None
) -> tuple:
    """(src tokens, src lengths, tgt tokens, tgt lengths, source == target or None, pair hashes or None) of one
    chunk, as numpy arrays (cheap to send back). clean: (data.drop_copies, data.drop_duplicates). tokenizer: a
    Tokenizer, or (digest, model bytes) in a worker process. sampling: (alpha, [(source seed, target seed) of
    each sampled segmentation]): then a seventh item, the list of each one's (src tokens, src lengths, tgt
    tokens, tgt lengths)."""
    if isinstance(tokenizer, tuple):
        digest, blobs = tokenizer
        if digest not in _loaded:
            _loaded.clear()
            _loaded[digest] = Tokenizer.from_bytes(blobs)
        tokenizer = _loaded[digest]
    same = np.fromiter(map(str.__eq__, src, tgt), dtype=bool, count=len(src)) if clean[0] else None
    hashes = pair_hashes(src, tgt) if clean[1] else None
    encoded = (*_pack(tokenizer.encode_src(src)), *_pack(tokenizer.encode_tgt(tgt)), same, hashes)
    if sampling is None:
        return encoded
    alpha, seeds = sampling
    sampled = [
        (*_pack(tokenizer.encode_src(src, (alpha, s))), *_pack(tokenizer.encode_tgt(tgt, (alpha, t)))) for s, t in seeds
    ]
    return *encoded, sampled


def chunk_seeds(seeds: list[int], chunk: int) -> list[tuple[int, int]]:
    """(source seed, target seed) of chunk number `chunk` for each of `seeds` (one per sampled segmentation):
    32-bit, from a hash, so that every chunk, side and segmentation draws its own stream, whatever the workers."""
    digest = lambda *parts: int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "little")
    return [(digest(seed, chunk, "src"), digest(seed, chunk, "tgt")) for seed in seeds]


class Workers:
    """`num_proc` encoding processes, forked by `start` (or at the first use) and ended by `close`. Fork where
    there is one (workers touch no torch), so callers need no __main__ guard."""

    def __init__(self, num_proc: int) -> None:
        self.num_proc = num_proc
        self.pool = None

    def start(self) -> Workers:
        if self.num_proc > 1 and self.pool is None:
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            self.pool = multiprocessing.get_context(method).Pool(self.num_proc)
        return self

    def close(self, error: bool = False) -> None:
        """End the processes (waited for, so that their peak memory counts in RUSAGE_CHILDREN)."""
        if self.pool is not None:
            self.pool.terminate() if error else self.pool.close()
            self.pool.join()
            self.pool = None

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, kind, *exc) -> None:
        self.close(error=kind is not None)


def encode_chunks(
    chunks: Iterator[Pairs], tokenizer: Tokenizer, *, workers: Workers, clean=(False, False), sampling=None
):
    """(pairs, `encode_chunk`'s arrays) of each chunk, in order: over the workers when there is more than one
    chunk and more than one worker, else here. Workers return numpy arrays, never Python lists: 1.2-1.4x faster
    on 2 cores than the `datasets.Dataset.map` this replaced, which converted every list of ids to Arrow
    (docs/benchmarks.md). sampling: (alpha, a seed per sampled segmentation), each chunk's seeds from
    `chunk_seeds`."""
    first = next(chunks, None)
    second = next(chunks, None) if first is not None else None
    chunks = enumerate(itertools.chain([c for c in (first, second) if c is not None], chunks))
    task = lambda i: None if sampling is None else (sampling[0], chunk_seeds(sampling[1], i))
    if workers.num_proc == 1 or second is None:
        yield from ((pair, encode_chunk(*pair, clean, tokenizer, task(i))) for i, pair in chunks)
        return
    blobs = tokenizer.to_bytes()
    sent = (hashlib.sha256(blobs["src"] + (blobs["tgt"] or b"")).hexdigest(), blobs)
    pool, pending = workers.start().pool, collections.deque()
    for i, pair in chunks:
        pending.append((pair, pool.apply_async(encode_chunk, (*pair, clean, sent, task(i)))))
        if len(pending) >= IN_FLIGHT * workers.num_proc:
            pair, result = pending.popleft()
            yield pair, result.get()
    while pending:
        pair, result = pending.popleft()
        yield pair, result.get()
