"""data.case_augmentation: copies of a share of the training pairs in ALL CAPS or in Title Case, both sides alike.

A model trained on ordinary text has seen few sentences in capitals: an ALL-CAPS heading segments into single
characters it never learned to translate, and the search falls into loops ("A A A A AMMMMMMM"). The fix is data:
a share `data.case_augmentation` of the training pairs is copied, each copy upper-cased or title-cased (half each)
on both sides, so that the model learns to keep the casing of its input, and SentencePiece, which learns from the
same stream, gets pieces for capitals.

- Added, not replacing: every original pair stays, so ordinary text loses no example; the copies make an epoch
  longer by the share (docs/training.md has what that costs in BLEU at a fixed number of updates).
- Which pairs: pair i of the training split (its index in the corpus, whatever the chunks) belongs to block
  i // BLOCK; each block draws round(share * BLOCK) of its pairs (exactly: the count of the first j * BLOCK pairs
  is round(j * BLOCK * share)) and their casings from a generator seeded with (seed, block). So a seed gives the
  same copies on every run, however the corpus is chunked and whatever the batch order; another seed, others.
- Where: the copies follow their chunk's originals, through the same encoding and filter (a copy whose pieces
  exceed data.max_tokens_per_sentence is dropped like any pair). Validation and test are never augmented.
- Memory: a chunk grows by the share; nothing else is held.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator

import numpy as np

from transformer.config import DataConfig
from transformer.data.corpus import CHUNK_PAIRS, Pairs, stream_pairs

log = logging.getLogger(__name__)

BLOCK = 1000  # pairs per block: each block draws its copies on its own, from (seed, block)
_WORD_START = re.compile(r"(?<![\w'’])\w")  # a word's first letter (not the "t" of "don't")


def title_case(text: str) -> str:
    """`text` with the first letter of every word upper-cased and the rest kept ("el rey David" -> "El Rey David")."""
    return _WORD_START.sub(lambda match: match.group().upper(), text)


CASINGS: tuple[Callable[[str], str], ...] = (str.upper, title_case)  # a copy's casing: its index here


def _block_draws(block: int, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Block `block`'s copies: (k,) sorted int64 offsets into the block, and (k,) int64 casings (CASINGS' index)."""
    count = round((block + 1) * BLOCK * share) - round(block * BLOCK * share)
    rng = np.random.default_rng([seed, block])
    offsets = np.sort(rng.choice(BLOCK, size=count, replace=False))
    return offsets.astype(np.int64), rng.integers(0, len(CASINGS), size=count)


def copies_between(start: int, stop: int, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs with corpus indices in [start, stop) that get a copy: (k,) sorted int64 indices, (k,) casings."""
    indices, casings = [np.empty(0, dtype=np.int64)], [np.empty(0, dtype=np.int64)]
    for block in range(start // BLOCK, -(-stop // BLOCK)):  # the blocks that meet [start, stop)
        offsets, kinds = _block_draws(block, share, seed)
        inside = (block * BLOCK + offsets >= start) & (block * BLOCK + offsets < stop)
        indices.append(block * BLOCK + offsets[inside])
        casings.append(kinds[inside])
    return np.concatenate(indices), np.concatenate(casings)


def with_case_copies(chunks: Iterator[Pairs], share: float, seed: int) -> Iterator[Pairs]:
    """Each chunk of `chunks` with its pairs' copies (`copies_between`) after its originals; logs the count."""
    start, made = 0, np.zeros(len(CASINGS), dtype=np.int64)
    for src, tgt in chunks:
        indices, casings = copies_between(start, start + len(src), share, seed)
        made += np.bincount(casings, minlength=len(CASINGS))
        picked = [(CASINGS[kind], i - start) for i, kind in zip(indices.tolist(), casings.tolist())]
        start += len(src)
        yield src + [case(src[i]) for case, i in picked], tgt + [case(tgt[i]) for case, i in picked]
    log.info(
        "train: data.case_augmentation %g: %d copies of %d pairs (%d in ALL CAPS, %d in Title Case)",
        share,
        int(made.sum()),
        start,
        *made.tolist(),
    )


def training_pairs(data: DataConfig, seed: int, size: int = CHUNK_PAIRS) -> Iterator[Pairs]:
    """The training split's chunks (of `size` pairs before the copies) as training and SentencePiece read them: with
    data.case_augmentation's copies (drawn from `seed`) when it is on, else exactly `stream_pairs`' chunks."""
    chunks = stream_pairs(data.train, data, size)
    return with_case_copies(chunks, data.case_augmentation, seed) if data.case_augmentation else chunks
