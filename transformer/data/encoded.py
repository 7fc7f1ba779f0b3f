"""The encoded form of a split and its cache folder: token arrays written chunk by chunk, read memory-mapped.

A split is four `.npy` arrays in one folder: `src_tokens` (int32, every source's pieces + EOS back to back),
`src_offsets` (int64, n + 1), `tgt_tokens` (int32, target pieces), `tgt_offsets` (int64), the model's lengths
`src_lengths` and `tgt_lengths` (int32, n: what batching reads, memory-mapped), plus `meta.json` (counts,
the filtering report) and, for evaluation splits, `text.json` (the raw sentences). `SplitWriter` appends encoded
chunks to the arrays as they come (a placeholder `.npy` header first, the real one written over it at the end:
numpy pads the header to a fixed size for any length, so the files are byte for byte what `np.save` writes), so
memory holds a chunk, never the split. `write_atomically` builds a folder under a temporary name and renames it
into place, so an interrupted run never leaves a folder that a later run takes as complete.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ARRAYS = ("src_tokens", "src_offsets", "tgt_tokens", "tgt_offsets")
LENGTHS = ("src_lengths", "tgt_lengths")  # int32, the model's lengths: written too, so that ranks share them
_DTYPES = {
    "src_tokens": np.int32,
    "src_offsets": np.int64,
    "tgt_tokens": np.int32,
    "tgt_offsets": np.int64,
    "src_lengths": np.int32,
    "tgt_lengths": np.int32,
}


def offsets_of(lengths: np.ndarray, start: int = 0) -> np.ndarray:
    """(n + 1,) int64 offsets from (n,) lengths, the first `start`."""
    offsets = np.full(len(lengths) + 1, start, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    offsets[1:] += start
    return offsets


@dataclass
class EncodedSplit:
    """One encoded split: every sequence back to back in a flat int32 array, found through int64 offsets."""

    src_tokens: np.ndarray  # (total source tokens,) int32: source pieces + EOS of every pair, back to back
    src_offsets: np.ndarray  # (n + 1,) int64: pair i's source is src_tokens[src_offsets[i]:src_offsets[i + 1]]
    tgt_tokens: np.ndarray  # (total target pieces,) int32: target pieces (no BOS/EOS), back to back
    tgt_offsets: np.ndarray  # (n + 1,) int64
    src_text: list[str] | None = None  # raw text kept for valid/test (translation input); None for train
    tgt_text: list[str] | None = None  # raw references kept for valid/test (BLEU); None for train
    dropped: dict[str, int] = field(default_factory=dict)  # training pairs filtered out, by reason
    src_lengths: np.ndarray | None = None  # (n,) int32, tokens incl. the EOS (from the offsets when not given)
    tgt_lengths: np.ndarray | None = None  # (n,) int32, target pieces + 1 (length of tgt_in and tgt_out)

    def __post_init__(self) -> None:
        if self.src_lengths is None:
            self.src_lengths = np.diff(self.src_offsets).astype(np.int32)
        if self.tgt_lengths is None:
            self.tgt_lengths = np.diff(self.tgt_offsets).astype(np.int32) + 1

    @classmethod
    def from_lists(
        cls, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], src_text=None, tgt_text=None
    ) -> EncodedSplit:
        """From Python lists: `src` rows end with EOS (as `encode_src` gives), `tgt` rows are pieces only."""
        if len(src) != len(tgt):
            raise ValueError(f"src has {len(src)} rows but tgt has {len(tgt)}")
        flat = [np.fromiter((t for row in rows for t in row), dtype=np.int32) for rows in (src, tgt)]
        lengths = [np.fromiter(map(len, rows), dtype=np.int64, count=len(rows)) for rows in (src, tgt)]
        return cls(flat[0], offsets_of(lengths[0]), flat[1], offsets_of(lengths[1]), src_text, tgt_text)

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    def __repr__(self) -> str:
        text = "kept" if self.src_text is not None else "none"
        return (
            f"EncodedSplit(pairs={len(self)}, src_tokens={int(self.src_lengths.sum())}, "
            f"tgt_tokens={int(self.tgt_lengths.sum())}, text={text}, dropped={self.dropped})"
        )

    def src(self, i: int) -> np.ndarray:
        """(S_i,) int32 source ids of pair i, ending with EOS."""
        return self.src_tokens[self.src_offsets[i] : self.src_offsets[i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        """(T_i - 1,) int32 target pieces of pair i, without BOS/EOS."""
        return self.tgt_tokens[self.tgt_offsets[i] : self.tgt_offsets[i + 1]]

    def select(self, keep: np.ndarray) -> EncodedSplit:
        """The pairs where the boolean mask `keep` (n,) is True, in order (vectorised gather, no Python loop)."""
        arrays = []
        for tokens, offsets in ((self.src_tokens, self.src_offsets), (self.tgt_tokens, self.tgt_offsets)):
            lengths = np.diff(offsets)
            arrays += [tokens[np.repeat(keep, lengths)], offsets_of(lengths[keep])]
        texts = [None if t is None else [s for s, k in zip(t, keep) if k] for t in (self.src_text, self.tgt_text)]
        return EncodedSplit(*arrays, *texts, dropped=dict(self.dropped))


def _write_header(f, name: str, count: int) -> None:
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(_DTYPES[name])), "fortran_order": False}
    np.lib.format.write_array_header_1_0(f, {**header, "shape": (count,)})


class SplitWriter:
    """Appends encoded chunks to the four `.npy` arrays of a split folder; `close` writes their real headers."""

    def __init__(self, folder: Path) -> None:
        names = ARRAYS + LENGTHS
        self.files = {name: open(folder / f"{name}.npy", "wb") for name in names}  # noqa: SIM115 (closed by close)
        self.counts = dict.fromkeys(names, 0)
        self.ends = {"src": 0, "tgt": 0}  # tokens written so far on each side
        for name, f in self.files.items():
            _write_header(f, name, 0)  # the same size as the final header (numpy pads it for any length)
        for side in ("src", "tgt"):
            self._write(f"{side}_offsets", np.zeros(1, dtype=np.int64))

    def _write(self, name: str, values: np.ndarray) -> None:
        self.files[name].write(np.ascontiguousarray(values, dtype=_DTYPES[name]).tobytes())
        self.counts[name] += len(values)

    def append(self, src_tokens, src_lengths, tgt_tokens, tgt_lengths) -> None:
        """One chunk: (flat int32 tokens, (n,) lengths) of each side, pairs in order."""
        for side, tokens, lengths in (("src", src_tokens, src_lengths), ("tgt", tgt_tokens, tgt_lengths)):
            self._write(f"{side}_tokens", tokens)
            self._write(f"{side}_offsets", offsets_of(lengths, self.ends[side])[1:])
            self._write(f"{side}_lengths", lengths + (side == "tgt"))
            self.ends[side] += len(tokens)

    def close(self) -> int:
        """Write the headers and close; returns the number of pairs written."""
        for name, f in self.files.items():
            size = f.tell()
            f.seek(0)
            _write_header(f, name, self.counts[name])
            if f.tell() != 128 or size != 128 + self.counts[name] * np.dtype(_DTYPES[name]).itemsize:
                raise AssertionError(f"{name}.npy: unexpected header or size")
            f.close()
        return self.counts["src_offsets"] - 1

    def abort(self) -> None:
        for f in self.files.values():
            f.close()


def save_extras(folder: Path, meta: dict[str, Any], dropped: dict[str, int], texts: tuple | None) -> None:
    """meta.json (with the filtering report) and, for evaluation splits, text.json (the raw sentences)."""
    if texts is not None:
        (folder / "text.json").write_text(json.dumps({"src": texts[0], "tgt": texts[1]}), "utf-8")
    (folder / "meta.json").write_text(json.dumps({**meta, "dropped": dropped}, indent=1), "utf-8")


def load_split(folder: Path) -> EncodedSplit:
    """A split folder's arrays memory-mapped (`np.load(mmap_mode="r")`: processes share their pages), its texts and
    filtering report. A folder written before the lengths were stored gets them from the offsets, in memory."""
    arrays = [np.load(folder / f"{name}.npy", mmap_mode="r") for name in ARRAYS]
    found = all((folder / f"{name}.npy").is_file() for name in LENGTHS)
    lengths = [np.load(folder / f"{name}.npy", mmap_mode="r") if found else None for name in LENGTHS]
    meta = json.loads((folder / "meta.json").read_text("utf-8"))
    text = folder / "text.json"
    texts = json.loads(text.read_text("utf-8")) if text.is_file() else {"src": None, "tgt": None}
    return EncodedSplit(*arrays, texts["src"], texts["tgt"], meta.get("dropped", {}), *lengths)


def _remove_abandoned(folder: Path) -> None:
    """Temporary folders for `folder` left by runs that were killed (their process no longer exists here)."""
    for tmp in folder.parent.glob(f".{folder.name}.*@{socket.gethostname()}.*"):
        pid = tmp.name.removeprefix(f".{folder.name}.").split("@")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def write_atomically(folder: Path, write: Callable[[Path], None]) -> None:
    """Run `write(tmp)` on a fresh temporary folder next to `folder`, then rename it into place. A folder left by
    a killed run is removed first; a run that fails removes its own."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(folder)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.{os.getpid()}@{socket.gethostname()}."))
    try:
        write(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared like the rest of the checkout
        os.replace(tmp, folder)
    except OSError:
        if not folder.is_dir():  # another process finished the same folder first: keep theirs
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
