"""Subword regularization of the training split: sampled segmentations, encoded once into the cache, one an epoch.

Kudo (2018), "Subword Regularization": a unigram model samples each sentence's segmentation from its lattice
(SentencePiece's `enable_sampling=True, alpha, nbest_size=-1`); Provilkov et al. (2020), "BPE-Dropout": a BPE
model skips each merge with probability alpha (the same call on a BPE model). Both draw a new segmentation each
epoch; validation, test and translation keep the deterministic one.

Here the encode-once cache keeps K = `data.subword_sampling.segmentations` sampled copies of the training split,
each a cache folder of its own (`train-sampled-<hash>`, keyed like the split plus alpha, train.seed and its
number k), all written in one pass over the corpus when missing; epoch e trains on copy e mod K
(`PreparedData.train_split`, `SegmentedBatchSampler`). So the encoding never runs on the training step's path, and
a resumed run, which knows its epoch, reads the very pieces the uninterrupted run read.

- Seeds: copy k of chunk i (`encoding.chunk_seeds`) draws from a hash of (train.seed, k, i) and the side, so one
  seed samples alike whatever `data.num_proc`, and copy k is the same whatever K. Within one process only, from
  SentencePiece 0.2.2 on: its `absl::BitGen` salts every seed once per process (`seeds_repeat_across_processes`,
  docs/training.md); the cache, not the seed, is what a resumed run relies on.
- Filtering: the length filter (`max_tokens_per_sentence`, `max_length_ratio`, and the copies and duplicates)
  decides on the deterministic segmentation, so every copy holds the same pairs as the `train-` folder. A pair
  whose sampled side exceeds `max_tokens_per_sentence` keeps its deterministic pieces in that copy (they fit: the
  filter kept them); no side ever exceeds the limit, nor `model.max_positions`. The ratio is not checked again.
- Batching: each copy has its own batches (`batching.batch_plan` in its folder): a sampled segmentation has more
  pieces, so its batches hold fewer pairs and `train.max_tokens` holds as it does without sampling.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from transformer.config import DataConfig
from transformer.data.case_augmentation import training_pairs
from transformer.data.cleaning import PairFilter
from transformer.data.corpus import CHUNK_PAIRS
from transformer.data.encoded import EncodedSplit, SplitWriter, load_split, save_extras, write_atomically
from transformer.data.encoding import Workers, encode_chunks
from transformer.data.tokenizer import Tokenizer, seeds_repeat_across_processes
from transformer.errors import UserError

log = logging.getLogger(__name__)


def select_rows(tokens: np.ndarray, lengths: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows where `keep` (n,) is True of ragged (flat tokens, (n,) lengths)."""
    return tokens[np.repeat(keep, lengths)], lengths[keep]


def merge_rows(first: tuple, second: tuple, use_first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row i of the ragged (flat tokens, (n,) lengths) `first` where use_first[i], else of `second`, in order."""
    rows, tokens = [], []
    for (flat, lengths), take in ((first, use_first), (second, ~use_first)):
        taken = np.repeat(take, lengths)  # (tokens,) bool
        rows.append(np.repeat(np.arange(len(lengths)), lengths)[taken])
        tokens.append(flat[taken])
    order = np.argsort(np.concatenate(rows), kind="stable")  # each row's tokens keep their order
    return np.concatenate(tokens)[order], np.where(use_first, first[1], second[1])


def _write_all(folders: Sequence[Path], write: Callable[[list[Path]], None], tmps: tuple = ()) -> None:
    """`write_atomically` of several folders: `write(temporary folders)` once, then each renamed into place."""
    if not folders:
        return write(list(tmps))
    write_atomically(folders[0], lambda tmp: _write_all(folders[1:], write, (*tmps, tmp)))


def _write_copies(tmps: list[Path], data: DataConfig, tokenizer: Tokenizer, workers: Workers, seeds: list) -> None:
    """Encode the training split once deterministically (for the filter) and once per sampled copy in `tmps`."""
    writers, pairs_filter, limit = [SplitWriter(tmp) for tmp in tmps], PairFilter(data), data.max_tokens_per_sentence
    clean, read = (data.drop_copies, data.drop_duplicates), 0
    fallbacks, pieces = np.zeros(len(tmps), dtype=np.int64), np.zeros((len(tmps) + 1, 2), dtype=np.int64)
    chunks = training_pairs(data, seeds[0][0], CHUNK_PAIRS)  # case copies (if any) as in the `train-` folder
    with contextlib.ExitStack() as on_error:
        on_error.callback(lambda: [writer.abort() for writer in writers])
        for _, (*plain, same, hashes, sampled) in encode_chunks(
            chunks, tokenizer, workers=workers, clean=clean, sampling=(data.subword_sampling.alpha, seeds)
        ):
            read += len(plain[1])
            keep = pairs_filter.keep(plain[1], plain[3] + 1, same, hashes)
            pieces[0] += plain[1][keep].sum(), plain[3][keep].sum()
            for k, (writer, copy) in enumerate(zip(writers, sampled)):
                too_long = (copy[1] > limit) | (copy[3] + 1 > limit)  # (n,): the deterministic pieces instead
                fallbacks[k] += int((too_long & keep).sum())
                src = select_rows(*merge_rows(plain[0:2], copy[0:2], too_long), keep)
                tgt = select_rows(*merge_rows(plain[2:4], copy[2:4], too_long), keep)
                pieces[k + 1] += src[1].sum(), tgt[1].sum()
                writer.append(*src, *tgt)
        on_error.pop_all()
    for k, (tmp, writer, seed) in enumerate(zip(tmps, writers, seeds)):
        meta = {
            "pairs_read": read,
            "pairs": writer.close(),
            "tokenizer": repr(tokenizer),
            "seed": list(seed),
            "alpha": data.subword_sampling.alpha,
            "deterministic_pairs": int(fallbacks[k]),
        }
        save_extras(tmp, meta, pairs_filter.dropped, None)
        growth = pieces[k + 1] / np.maximum(pieces[0], 1) - 1
        log.info(
            "train: sampled segmentation %d: %+.1f%% source and %+.1f%% target pieces; %d pair(s) over "
            "data.max_tokens_per_sentence kept the deterministic one",
            seed[1],
            100 * growth[0],
            100 * growth[1],
            fallbacks[k],
        )


def prepare_segmentations(
    folders: list[Path], data: DataConfig, seed: int, tokenizer: Tokenizer, workers: Workers
) -> list[EncodedSplit]:
    """The training split's sampled copies, copy k in folders[k]: from the cache, the missing ones encoded in one
    pass (copy k seeded from (seed, k))."""
    tokenizer.encode_src([], (data.subword_sampling.alpha, 0))  # refused here, before any work, through a table
    missing = [k for k, folder in enumerate(folders) if not (folder / "meta.json").is_file()]
    if missing:
        log.info(
            "train: encoding sampled segmentations %s of %d (alpha %g)",
            missing,
            len(folders),
            data.subword_sampling.alpha,
        )
        if not seeds_repeat_across_processes():
            log.warning(
                "train: SentencePiece %s salts its sampling seeds once per process, so another preparation "
                "of this setting would sample other copies (this cache keeps these; sentencepiece<0.2.2 "
                "repeats them)",
                spm.__version__,
            )
        seeds = [(seed, k) for k in missing]
        _write_all([folders[k] for k in missing], lambda tmps: _write_copies(tmps, data, tokenizer, workers, seeds))
    return [load_split(folder) for folder in folders]


class SegmentedBatchSampler:
    """`TokenBatchSampler`s, one per sampled copy of the training split (each with its own batches), moved as one:
    epoch e yields copy e mod K's batches, in the order that sampler gives epoch e. `state_dict` is
    TokenBatchSampler's (epoch, position and the settings) plus the sampling setting, which a resume must match."""

    def __init__(self, samplers: list, setting: str) -> None:
        self.samplers, self.setting = samplers, setting
        self.epoch = 0  # current epoch, from 0
        self.position = 0  # batches of the current epoch already yielded on this rank

    @property
    def current(self):
        """The sampler of the current epoch's copy."""
        return self.samplers[self.epoch % len(self.samplers)]

    def __len__(self) -> int:
        """Batches in the current epoch on this rank."""
        return len(self.current)

    def __iter__(self) -> Iterator[list[int]]:
        inner = self.current
        inner.epoch, inner.position = self.epoch, self.position
        for indices in inner:
            self.position = inner.position
            yield indices
        self.epoch, self.position = inner.epoch, inner.position

    def state_dict(self) -> dict:
        state = self.current.state_dict()
        return {**state, "epoch": self.epoch, "position": self.position, "subword_sampling": self.setting}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a saved (epoch, position), saved with the same sampling setting (and TokenBatchSampler's)."""
        if state.get("subword_sampling") != self.setting:
            was = state.get("subword_sampling") or "off"
            raise UserError(
                f"cannot resume the batch order: it was saved with data.subword_sampling {was}, now "
                f"{self.setting}; resume with the same setting"
            )
        self.samplers[0].load_state_dict({k: v for k, v in state.items() if k != "subword_sampling"})
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
