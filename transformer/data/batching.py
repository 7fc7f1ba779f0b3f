"""Token-based batches: length-bucketed, shuffled per epoch, sharded by rank, resumable mid-epoch.

Paper, section 5.1: "Sentence pairs were batched together by approximate sequence length. Each training batch
contained a set of sentence pairs containing approximately 25000 source tokens and 25000 target tokens."

`TokenBatchSampler` fixes the batches once, from the seed: pairs are sorted by max(source, target length), then by
source length, with a seeded random tie-break, and cut greedily into batches whose padded size B * max(S, T) is at
most `max_tokens`.
Only the batch order changes between epochs, shuffled from (seed, epoch). With `world_size` W, each epoch's
shuffled order is cut to a multiple of W (the last `n_batches % W` batches of that epoch's order are dropped; with
shuffling a different few each epoch) and rank r takes every W-th batch from position r, so ranks get disjoint,
equally many batches. A pair longer than `max_tokens` by itself forms a batch alone (and a warning is logged);
`data.max_tokens_per_sentence` normally filters such pairs out at preparation time.

`collate` turns a list of pair indices into padded tensors. Legend: B batch, S source len, T target len.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer.errors import UserError

if TYPE_CHECKING:
    from transformer.data.prepare import EncodedSplit

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """One padded batch. `tgt_in` = BOS + pieces and `tgt_out` = pieces + EOS (the labels), both (B, T)."""

    src: torch.Tensor  # (B, S) long, pieces + EOS, padded with PAD_ID
    tgt_in: torch.Tensor  # (B, T) long, BOS + pieces, padded
    tgt_out: torch.Tensor  # (B, T) long, pieces + EOS, padded
    indices: list[int]  # pair indices in the split, row by row
    n_tgt_tokens: int | None = None  # non-pad tokens in tgt_out; computed from tgt_out when not given
    tgt_index: torch.Tensor | None = None  # (n_tgt_tokens,) long: flat positions of the non-pad tgt_out in B*T

    def __post_init__(self) -> None:
        if self.n_tgt_tokens is None:
            self.n_tgt_tokens = int(self.tgt_out.ne(PAD_ID).sum())
        if self.tgt_index is None:  # made here, on the host, so the loss needs no device sync to find the targets
            self.tgt_index = self.tgt_out.flatten().ne(PAD_ID).nonzero().squeeze(1)

    def __len__(self) -> int:
        return len(self.indices)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        move = lambda t: t.to(device, non_blocking=non_blocking)
        src, tgt_in, tgt_out, tgt_index = (move(t) for t in (self.src, self.tgt_in, self.tgt_out, self.tgt_index))
        return Batch(src, tgt_in, tgt_out, self.indices, self.n_tgt_tokens, tgt_index)

    def pin_memory(self) -> Batch:
        """Page-locked copies (what `DataLoader(pin_memory=True)` calls), for asynchronous host-to-GPU copies."""
        pinned = (t.pin_memory() for t in (self.src, self.tgt_in, self.tgt_out, self.tgt_index))
        src, tgt_in, tgt_out, tgt_index = pinned
        return Batch(src, tgt_in, tgt_out, self.indices, self.n_tgt_tokens, tgt_index)


def _gather(tokens: np.ndarray, offsets: np.ndarray, idx: np.ndarray):
    """Flat tokens of the rows `idx`, with each token's (row, column): a vectorised ragged gather."""
    starts, lengths = offsets[idx], offsets[idx + 1] - offsets[idx]  # (B,), (B,)
    row = np.repeat(np.arange(len(idx)), lengths)  # (total,)
    col = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)  # (total,)
    return np.asarray(tokens[np.repeat(starts, lengths) + col], dtype=np.int64), lengths, row, col


# Padded lengths with `train.length_buckets`: 8, 16, 24, then 1 and 1.5 times powers of two (at most a third of
# padding), so that a run sees a few dozen batch shapes and torch.compile compiles each once.
LENGTH_BUCKETS = (8, 16, 24) + tuple(int(m * 2**k) for k in range(5, 13) for m in (1, 1.5))  # ... 4096, 6144


def bucket_lengths(lengths: np.ndarray) -> np.ndarray:
    """The smallest bucket in LENGTH_BUCKETS that holds each length (beyond the last: a multiple of 1024)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    buckets = np.asarray(LENGTH_BUCKETS, dtype=np.int64)
    found = buckets[np.minimum(np.searchsorted(buckets, lengths), len(buckets) - 1)]
    return np.where(lengths <= buckets[-1], found, -(-lengths // 1024) * 1024)


def bucket_length(length: int) -> int:
    """`bucket_lengths` of one length."""
    return int(bucket_lengths(np.asarray([length]))[0])


def collate(split: EncodedSplit, indices: Sequence[int], *, bucket: bool = False, bos_id: int = BOS_ID) -> Batch:
    """Padded tensors for the pairs `indices` of `split`: src (B, S), tgt_in and tgt_out (B, T), all long.

    bos_id: the decoder's first input (`Tokenizer.bos_id`: BOS, or the pad id for a model imported from Marian).

    bucket: pad both sides to one length, `bucket_length(max(S, T))` (S = T; `train.length_buckets`).
    """
    idx = np.asarray(indices, dtype=np.int64)
    if idx.ndim != 1 or len(idx) == 0:
        raise ValueError(f"collate needs a non-empty list of indices, got {indices!r}")
    B = len(idx)
    values, src_len, row, col = _gather(split.src_tokens, split.src_offsets, idx)
    tgt_values, pieces, tgt_row, tgt_col = _gather(split.tgt_tokens, split.tgt_offsets, idx)
    S, T = int(src_len.max()), int(pieces.max()) + 1
    if bucket:
        S = T = bucket_length(max(S, T))
    src = np.full((B, S), PAD_ID, dtype=np.int64)  # (B, S)
    src[row, col] = values
    values, row, col = tgt_values, tgt_row, tgt_col
    tgt_in = np.full((B, T), PAD_ID, dtype=np.int64)  # (B, T)
    tgt_in[:, 0] = bos_id
    tgt_in[row, col + 1] = values
    tgt_out = np.full((B, T), PAD_ID, dtype=np.int64)  # (B, T)
    tgt_out[row, col] = values
    tgt_out[np.arange(B), pieces] = EOS_ID
    n_tgt = pieces + 1  # (B,) non-pad labels per row: the pieces and the EOS
    starts = np.cumsum(n_tgt) - n_tgt
    tgt_index = np.repeat(np.arange(B) * T, n_tgt) + np.arange(int(n_tgt.sum())) - np.repeat(starts, n_tgt)
    tensors = (torch.from_numpy(a) for a in (src, tgt_in, tgt_out))
    return Batch(*tensors, indices=idx.tolist(), n_tgt_tokens=int(n_tgt.sum()), tgt_index=torch.from_numpy(tgt_index))


def build_batches(
    src_lengths: np.ndarray, tgt_lengths: np.ndarray, *, max_tokens: int, seed: int, buckets: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(order, bounds): batch b is order[bounds[b]:bounds[b + 1]], with B * max(S, T) <= max_tokens.

    Pairs are sorted by max(S, T), then by S (which keeps the shorter side aligned too: padding efficiency 0.98
    instead of 0.94 on WMT-like lengths), ties broken by a random permutation from `seed`; then cut greedily,
    each cut one vectorised look at the next window (a Python step per batch, not per pair).
    buckets: batches never mix length buckets, and each holds max_tokens // L pairs of bucket L (the last of a
    bucket fewer), so B x L <= max_tokens for the padded length L and the shapes come from a small set.
    Memory: 4-byte lengths and indices; the peak is the stable argsort (its 8-byte result and radix buffer): 1.4 GB
    of peak RSS for 36M pairs (WMT14 EN-FR's size), 2.0 GB with 8-byte arrays (docs/benchmarks.md).
    """
    index = np.int32 if len(src_lengths) < 2**31 else np.int64
    src = np.asarray(src_lengths, dtype=np.int32)
    key = np.maximum(src, np.asarray(tgt_lengths, dtype=np.int32))  # (n,)
    shuffled = np.arange(len(key), dtype=index)
    np.random.default_rng(seed).shuffle(shuffled)  # (n,) the draws of permutation(n), in 4 bytes a pair
    span = int(src.max()) + 1
    wide = np.int64 if (int(key.max()) + 1) * span >= 2**31 else np.int32
    sort_key = (key.astype(wide) * span + src)[shuffled]  # (n,) lexicographic (max length, source length)
    if sort_key.max() < 2**16:
        sort_key = sort_key.astype(np.uint16)  # numpy's stable sort is a radix sort for 16-bit integers
    order = shuffled[np.argsort(sort_key, kind="stable")]  # stable: ties keep the random order
    del shuffled, sort_key
    sorted_key = key[order]
    if buckets:
        return order, _cut_by_bucket(bucket_lengths(sorted_key), max_tokens)
    bounds, i, n = [0], 0, len(order)
    while i < n:
        window = sorted_key[i : i + max(1, max_tokens // max(1, int(sorted_key[i])))]  # longest batch that might fit
        fits = np.arange(1, len(window) + 1) * window <= max_tokens  # True..True False..False (window sorted)
        i += len(window) if fits[-1] else max(1, int(np.argmin(fits)))
        bounds.append(i)
    return order, np.asarray(bounds, dtype=np.int64)


def batch_plan(
    folder: str | Path | None,
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    *,
    max_tokens: int,
    seed: int,
    buckets: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """`build_batches`' (order, bounds), kept in the split's cache folder `folder` and read back memory-mapped:
    built once, by the first process that needs it, and shared by every rank's page cache (the order is 8 bytes a
    pair; building it holds a few such arrays for a moment). Without a folder, or a writable one: built here."""
    if folder is not None:
        stem = f"batches-{max_tokens}-{seed}-{'buckets' if buckets else 'sorted'}"
        paths = [Path(folder) / f"{stem}-{part}.npy" for part in ("order", "bounds")]
        if all(path.is_file() for path in paths):
            return np.load(paths[0], mmap_mode="r"), np.load(paths[1], mmap_mode="r")
    plan = build_batches(src_lengths, tgt_lengths, max_tokens=max_tokens, seed=seed, buckets=buckets)
    if folder is not None:
        with contextlib.suppress(OSError):  # a read-only cache: this process keeps its own
            for path, array in zip(paths, plan):  # bounds last: once it is there, both are whole
                tmp = path.with_name(f".{path.name}.{os.getpid()}")
                with open(tmp, "wb") as f:
                    np.save(f, array)
                os.replace(tmp, path)
    return plan


def _cut_by_bucket(bucketed: np.ndarray, max_tokens: int) -> np.ndarray:
    """Bounds of batches of max_tokens // L pairs within each run of one bucket L (bucketed is sorted)."""
    runs = [0, *(np.flatnonzero(np.diff(bucketed)) + 1).tolist(), len(bucketed)]
    bounds = [0]
    for start, end in zip(runs[:-1], runs[1:]):
        size = max(1, max_tokens // int(bucketed[start]))
        bounds.extend(range(start + size, end, size))
        bounds.append(end)
    return np.asarray(bounds, dtype=np.int64)


class TokenBatchSampler:
    """Yields lists of pair indices: the remaining batches of the current epoch for this rank.

    Each yielded batch advances `position`; when the epoch's batches are exhausted, `epoch` += 1 and `position`
    = 0. `state_dict` / `load_state_dict` save and restore (epoch, position), so a resumed run continues with
    exactly the batches an uninterrupted run would have seen.
    """

    def __init__(
        self,
        src_lengths: np.ndarray,
        tgt_lengths: np.ndarray,
        *,
        max_tokens: int,
        seed: int,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
        buckets: bool = False,
        plan: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size), got rank {rank} of {world_size}")
        if max_tokens <= 0 or len(src_lengths) != len(tgt_lengths) or len(src_lengths) == 0:
            raise ValueError("need max_tokens > 0 and equally many (at least one) source and target lengths")
        self.src_lengths = np.asarray(src_lengths)
        self.tgt_lengths = np.asarray(tgt_lengths)
        self.max_tokens, self.seed, self.shuffle = int(max_tokens), int(seed), bool(shuffle)
        self.rank, self.world_size, self.buckets = int(rank), int(world_size), bool(buckets)
        self.epoch = 0  # current epoch, from 0
        self.position = 0  # batches of the current epoch already yielded on this rank
        self._order, self._bounds = plan or build_batches(
            self.src_lengths, self.tgt_lengths, max_tokens=max_tokens, seed=seed, buckets=buckets
        )  # plan: the same, from `batch_plan` (memory-mapped from the cache)
        self.n_batches = len(self._bounds) - 1  # over all ranks, before dropping the remainder
        if self.n_batches < world_size:
            raise UserError(
                f"only {self.n_batches} batch(es) of at most {max_tokens} tokens for {world_size} devices; "
                "lower the batch size (train.max_tokens) or use fewer devices"
            )
        too_long = int((np.maximum(self.src_lengths, self.tgt_lengths) > max_tokens).sum())
        if too_long:
            log.warning("%d pair(s) are longer than max_tokens=%d; each forms a batch alone", too_long, max_tokens)

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        return self.n_batches // self.world_size

    def batch(self, b: int) -> np.ndarray:
        """(B_b,) int64 pair indices of batch b (in build order, not epoch order)."""
        return self._order[self._bounds[b] : self._bounds[b + 1]]

    def epoch_batches(self, epoch: int) -> np.ndarray:
        """(len(self),) ids of this rank's batches in `epoch`, in the order they are yielded."""
        if self.shuffle:
            order = np.random.default_rng((self.seed, epoch)).permutation(self.n_batches)
        else:
            order = np.arange(self.n_batches)
        return order[: len(self) * self.world_size][self.rank :: self.world_size]

    def __iter__(self) -> Iterator[list[int]]:
        epoch_batches = self.epoch_batches(self.epoch)
        while self.position < len(epoch_batches):
            b = epoch_batches[self.position]
            self.position += 1
            yield self.batch(b).tolist()
        self.epoch, self.position = self.epoch + 1, 0

    def state_dict(self) -> dict:
        """Plain ints, safe in a `weights_only` checkpoint; the settings are kept to refuse a mismatched resume."""
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
            "world_size": self.world_size,
            "n_examples": len(self.src_lengths),
            "shuffle": int(self.shuffle),
            "buckets": int(self.buckets),
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from a saved (epoch, position); the data, seed, max_tokens and world size must be the same."""
        mine = self.state_dict()
        if state.get("subword_sampling"):
            raise UserError(
                f"cannot resume the batch order: it was saved with data.subword_sampling "
                f"{state['subword_sampling']}, now off; resume with the same setting"
            )
        for key in ("seed", "max_tokens", "world_size", "n_examples", "shuffle", "buckets"):
            if key in state and int(state[key]) != mine[key]:
                raise UserError(
                    f"cannot resume the batch order: it was saved with {key}={state[key]}, now {mine[key]}; "
                    "resume with the same data, train.seed, train.max_tokens, train.length_buckets and number of "
                    "devices"
                )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

    def padding_efficiency(self) -> float:
        """Real tokens / padded tokens over all batches: sum(S_i + T_i) / sum(B * (max S + max T))."""
        src, tgt = self.src_lengths[self._order].astype(np.int64), self.tgt_lengths[self._order].astype(np.int64)
        starts, sizes = self._bounds[:-1], np.diff(self._bounds)
        padded = sizes * (np.maximum.reduceat(src, starts) + np.maximum.reduceat(tgt, starts))
        return float((src.sum() + tgt.sum()) / padded.sum())
