"""encoded.py: the streamed .npy writer against np.save, loading with and without stored lengths, atomic folders."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest

from transformer.data.encoded import ARRAYS, EncodedSplit, SplitWriter, load_split, save_extras, write_atomically


@pytest.mark.parametrize("chunks", [[], [3], [1, 4, 2], [0, 5]])
def test_the_writer_writes_what_np_save_writes(chunks, tmp_path):
    rng = np.random.default_rng(0)
    rows = [[rng.integers(4, 99, size=rng.integers(0, 6)).tolist() for _ in range(n)] for n in chunks]
    src = [[*r, 3] for chunk in rows for r in chunk]
    tgt = [r[::-1] for chunk in rows for r in chunk]
    writer = SplitWriter(tmp_path)
    start = 0
    for chunk in rows:
        part = EncodedSplit.from_lists(src[start : start + len(chunk)], tgt[start : start + len(chunk)])
        writer.append(part.src_tokens, np.diff(part.src_offsets), part.tgt_tokens, np.diff(part.tgt_offsets))
        start += len(chunk)
    assert writer.close() == len(src)
    whole = EncodedSplit.from_lists(src, tgt)
    for name in ARRAYS:
        saved = io.BytesIO()
        np.save(saved, getattr(whole, name))
        assert (tmp_path / f"{name}.npy").read_bytes() == saved.getvalue(), name
    save_extras(tmp_path, {"pairs": len(src)}, {}, None)
    loaded = load_split(tmp_path)
    assert isinstance(loaded.src_lengths, np.memmap) and loaded.src_lengths.tolist() == whole.src_lengths.tolist()
    assert loaded.tgt_lengths.tolist() == whole.tgt_lengths.tolist()
    for name in ("src_lengths", "tgt_lengths"):  # a folder from before the lengths were stored
        os.remove(tmp_path / f"{name}.npy")
    older = load_split(tmp_path)
    assert older.src_lengths.tolist() == whole.src_lengths.tolist() and older.tgt_lengths.dtype == np.int32


def test_an_abandoned_temporary_folder_is_removed_and_a_live_one_kept(tmp_path):
    import socket

    host = socket.gethostname()
    dead = subprocess_pid_that_exited()
    abandoned = tmp_path / f".train-x.{dead}@{host}.abc"
    live = tmp_path / f".train-x.{os.getpid()}@{host}.def"
    other_host = tmp_path / f".train-x.{dead}@another-{host}.ghi"
    for folder in (abandoned, live, other_host):
        folder.mkdir()
    write_atomically(tmp_path / "train-x", lambda tmp: (tmp / "meta.json").write_text("{}"))
    assert (tmp_path / "train-x" / "meta.json").is_file()
    assert not abandoned.exists() and live.exists() and other_host.exists()


def subprocess_pid_that_exited() -> int:
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


def test_a_failed_write_leaves_no_folder(tmp_path):
    def fail(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_atomically(tmp_path / "train-y", fail)
    assert list(tmp_path.iterdir()) == []
