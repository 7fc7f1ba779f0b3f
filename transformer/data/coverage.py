"""How much of a text the vocabulary covers: the share of characters and of sentences that would meet `<unk>`
(what `transformer-prepare` reports for each split, and `data.spm_byte_fallback` brings to zero).

A character meets `<unk>` when the SentencePiece model has no piece for it (it was rarer than
`data.character_coverage` left in, or absent from the training text) and byte fallback is off.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from transformer.data.tokenizer import UNK_ID, Tokenizer


def unknown_characters(tokenizer: Tokenizer, characters: Sequence[str], side: str) -> set[str]:
    """Those of `characters` that `tokenizer` writes as `<unk>` on `side` ("src" or "tgt"; none with byte fallback)."""
    encode = tokenizer.encode_src if side == "src" else tokenizer.encode_tgt
    return {c for c, ids in zip(characters, encode(list(characters))) if UNK_ID in ids}


def character_counts(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """((C,) uint32 code points, (C,) int64 counts) of the distinct characters of `texts`, in code point order:
    `collections.Counter("".join(texts))` counted by numpy: with `sentences_meeting`, `UnknownCounter` about 10x
    faster than a Counter per sentence (docs/benchmarks.md, "The data path at WMT scale, streamed"). Memory: 12
    bytes a character of `texts`, 8 a code point up to the largest."""
    counts = np.bincount(_code_points("".join(texts)))
    present = np.flatnonzero(counts)
    return present.astype(np.uint32), counts[present]


def sentences_meeting(texts: Sequence[str], characters: set[str]) -> int:
    """How many of `texts` hold at least one of `characters`: `sum(not characters.isdisjoint(t) for t in texts)`,
    found by numpy over the texts' code points."""
    if not characters or not texts:
        return 0
    codes = _code_points("".join(texts))
    wanted = np.fromiter(map(ord, characters), dtype=np.uint32, count=len(characters))
    positions = np.flatnonzero(np.isin(codes, wanted, kind="table"))  # in the texts joined
    ends = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)))
    return len(np.unique(np.searchsorted(ends, positions, side="right")))


def _code_points(text: str) -> np.ndarray:
    """(len(text),) uint32: the code point of each character (as iterating over `text` gives them)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


class UnknownCounter:
    """`unknown_share` added up chunk by chunk (what `transformer-prepare` does as it streams a split): memory holds
    the distinct characters, whether each meets `<unk>` known once, and the code points of BATCH sentences."""

    BATCH = 4096  # sentences counted at once (8-12 bytes a character of theirs)

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.counts = {"src": collections.Counter(), "tgt": collections.Counter()}
        self.unknown: dict[str, set[str]] = {"src": set(), "tgt": set()}
        self.hits, self.sentences = {"src": 0, "tgt": 0}, 0

    def add(self, src: Sequence[str], tgt: Sequence[str]) -> None:
        for start in range(0, len(src), self.BATCH):
            self._add(src[start : start + self.BATCH], tgt[start : start + self.BATCH])

    def _add(self, src: Sequence[str], tgt: Sequence[str]) -> None:
        for side, texts in (("src", src), ("tgt", tgt)):
            codes, numbers = character_counts(texts)
            counts = dict(zip(map(chr, codes.tolist()), numbers.tolist()))
            new = [c for c in counts if c not in self.counts[side] and not c.isspace()]
            self.unknown[side] |= unknown_characters(self.tokenizer, new, side)
            self.counts[side].update(counts)
            self.hits[side] += sentences_meeting(texts, self.unknown[side])
        self.sentences += len(src)

    def report(self) -> dict[str, dict[str, float]]:
        report = {}
        for side, counts in self.counts.items():
            total = sum(n for c, n in counts.items() if not c.isspace())
            share = sum(counts[c] for c in self.unknown[side]) / max(total, 1)
            report[side] = {"characters": share, "sentences": self.hits[side] / max(self.sentences, 1)}
        return report


def unknown_share(tokenizer: Tokenizer, src: Sequence[str], tgt: Sequence[str]) -> dict[str, dict[str, float]]:
    """The share of characters (whitespace left out) and of sentences that meet `<unk>` under `tokenizer`, per side:
    {"src": {"characters": ..., "sentences": ...}, "tgt": ...}, fractions in [0, 1]. Memory: the distinct characters."""
    counter = UnknownCounter(tokenizer)
    counter.add(src, tgt)
    return counter.report()


def describe_unknown(report: dict[str, dict[str, float]]) -> str:
    """'0.01% of source characters (0.2% of sentences), 0% of target characters (0% of sentences)'."""
    sides = {"src": "source", "tgt": "target"}
    return ", ".join(
        f"{report[side]['characters']:.3%} of {name} characters ({report[side]['sentences']:.2%} of sentences)"
        for side, name in sides.items()
    )


def unknown_report(folder: str | Path) -> str | None:
    """The `<unk>` shares an encoded split's cache folder recorded (its meta.json), described; None if it has none."""
    meta = Path(folder) / "meta.json"
    report = json.loads(meta.read_text("utf-8")).get("unknown") if meta.is_file() else None
    return describe_unknown(report) if report else None
