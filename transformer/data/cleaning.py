"""Filtering the training pairs, a chunk at a time: the length filters, and the optional cleaning of large corpora.

Each dropped pair is counted once, under the first of its reasons in this order:

    empty             a side with no pieces besides the EOS
    too_long          a side longer than `data.max_tokens_per_sentence` tokens
    length_ratio      longer side / shorter side above `data.max_length_ratio` (0 = off)
    source_is_target  the source sentence equals the target sentence (`data.drop_copies`)
    duplicate         the pair equals an earlier kept pair (`data.drop_duplicates`)

Lengths are the model's sequence lengths: source pieces + EOS, target pieces + 1 (the length of tgt_in and tgt_out).
Duplicates are found by a 64-bit hash of the pair (BLAKE2b); the hashes of the kept pairs are the one memory cost
that grows with the corpus, 8 bytes a pair (36M pairs: 290 MB), held as a few sorted arrays merged like a binary
counter. Two different pairs share a hash with probability about n^2 / 2^65 (36M pairs: 4e-5).
"""

from __future__ import annotations

import hashlib
import logging

import numpy as np

from transformer.config import DataConfig

log = logging.getLogger(__name__)

REASONS = ("empty", "too_long", "length_ratio", "source_is_target", "duplicate")


def pair_hashes(src: list[str], tgt: list[str]) -> np.ndarray:
    """(n,) uint64 hashes of the pairs; 0xFF (never in UTF-8) separates the two sides."""
    digest = lambda s, t: hashlib.blake2b(s.encode() + b"\xff" + t.encode(), digest_size=8).digest()
    return np.frombuffer(b"".join(map(digest, src, tgt)), dtype=np.uint64)


def length_reasons(src_len: np.ndarray, tgt_len: np.ndarray, data: DataConfig) -> dict[str, np.ndarray]:
    """Boolean masks (n,) of the pairs dropped for each length reason, each pair under its first reason only."""
    src_len, tgt_len = src_len.astype(np.int64), tgt_len.astype(np.int64)
    empty = (src_len <= 1) | (tgt_len <= 1)  # no pieces besides the EOS
    too_long = ~empty & ((src_len > data.max_tokens_per_sentence) | (tgt_len > data.max_tokens_per_sentence))
    ratio = np.maximum(src_len, tgt_len) / np.maximum(np.minimum(src_len, tgt_len), 1)
    bad_ratio = ~empty & ~too_long & (ratio > data.max_length_ratio) if data.max_length_ratio > 0 else empty & False
    return {"empty": empty, "too_long": too_long, "length_ratio": bad_ratio}


class SeenHashes:
    """The hashes of the pairs kept so far, as sorted arrays of sizes growing by powers of two (a binary counter
    of merges: adding n hashes costs O(n log n) in all, a look-up one binary search per array)."""

    def __init__(self) -> None:
        self.levels: list[np.ndarray] = []

    def __len__(self) -> int:
        return sum(len(level) for level in self.levels)

    def first_seen(self, hashes: np.ndarray) -> np.ndarray:
        """(n,) bool: the hashes seen neither earlier in `hashes` nor before; those are then added."""
        unique, first = np.unique(hashes, return_index=True)
        new = np.ones(len(unique), dtype=bool)
        for level in self.levels:
            at = np.minimum(np.searchsorted(level, unique), len(level) - 1)
            new &= level[at] != unique
        keep = np.zeros(len(hashes), dtype=bool)
        keep[first[new]] = True
        self._add(unique[new])
        return keep

    def _add(self, sorted_hashes: np.ndarray) -> None:
        if not len(sorted_hashes):
            return
        level = sorted_hashes
        while self.levels and len(self.levels[-1]) <= 2 * len(level):
            level = np.union1d(self.levels.pop(), level)
        self.levels.append(level)


class PairFilter:
    """Drops training pairs chunk by chunk and counts the reasons (`dropped`, in REASONS order)."""

    def __init__(self, data: DataConfig) -> None:
        self.data = data
        self.seen = SeenHashes() if data.drop_duplicates else None
        reasons = REASONS[:3] + ("source_is_target",) * data.drop_copies + ("duplicate",) * data.drop_duplicates
        self.dropped = dict.fromkeys(reasons, 0)
        self.read = 0

    def keep(self, src_len: np.ndarray, tgt_len: np.ndarray, same: np.ndarray | None, hashes: np.ndarray | None):
        """(n,) bool mask of the chunk's pairs to keep. same: (n,) bool, source equals target (drop_copies);
        hashes: (n,) uint64 pair hashes (drop_duplicates)."""
        masks = length_reasons(src_len, tgt_len, self.data)
        dropped = masks["empty"] | masks["too_long"] | masks["length_ratio"]
        if self.data.drop_copies:
            masks["source_is_target"] = same & ~dropped
            dropped |= same
        if self.seen is not None:
            masks["duplicate"] = np.zeros_like(dropped)
            masks["duplicate"][~dropped] = ~self.seen.first_seen(hashes[~dropped])
            dropped |= masks["duplicate"]
        for reason in self.dropped:
            self.dropped[reason] += int(masks[reason].sum())
        self.read += len(dropped)
        return ~dropped

    def report(self) -> None:
        """The log line of what was kept and dropped."""
        data, kept = self.data, self.read - sum(self.dropped.values())
        extra = "".join(f", {self.dropped[r]} {r.replace('_', ' ')}" for r in REASONS[3:] if r in self.dropped)
        log.info(
            "train: kept %d of %d pairs; dropped %d with an empty side, %d longer than %d tokens, "
            "%d with a length ratio above %g%s",
            kept,
            self.read,
            self.dropped["empty"],
            self.dropped["too_long"],
            data.max_tokens_per_sentence,
            self.dropped["length_ratio"],
            data.max_length_ratio,
            extra,
        )
