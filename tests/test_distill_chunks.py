"""The teacher's translation in chunks (training/distill_chunks.py), with a scripted teacher (each line's words
reversed, log-probability -1 per word): a run killed mid-chunk and rerun gives the same bytes and translates only
what was missing, two ranks together write the chunks of one, the manifest refuses another translation, a missing
chunk is named, and the progress arithmetic."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from transformer.errors import UserError
from transformer.training.distill_chunks import (
    check_manifest,
    chunk_path,
    lines_to_do,
    merge_chunks,
    row,
    translate_chunks,
)

LINES = [f"line {i}" + " word" * (i % 4) for i in range(23)]  # 23 lines: chunks of 5 leave a last one of 3


@dataclass
class Hypothesis:
    text: str
    log_prob: float
    tokens: list[int]


class ScriptedTeacher:
    """`Translator.translate`'s shape: one list of hypotheses per line; records the chunks it was handed."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def translate(self, lines, *, chunk_lines, progress):
        lines = list(lines)
        assert chunk_lines == len(lines)  # the chunk is one batch plan: whole
        self.calls.append(lines)
        progress(len(lines))
        for line in lines:
            words = line.split()
            yield [Hypothesis(" ".join(reversed(words)), -1.0 * len(words), list(range(len(words))))]


def _chunks(size: int):
    return (
        (LINES[i : i + size], [f"ref {i + j}" for j in range(len(LINES[i : i + size]))]) for i in range(0, 23, size)
    )


def _expected() -> str:
    """The corpus by hand: each line reversed, its target, -words / (words + 1)."""
    rows = []
    for i, line in enumerate(LINES):
        words = line.split()
        rows.append(f"{line}\t{' '.join(reversed(words))}\tref {i}\t{-len(words) / (len(words) + 1):.4f}\n")
    return "".join(rows)


def test_a_row_holds_source_output_target_and_the_score_per_piece():
    assert row("a\tb", "x y", "t", -3.0, 2) == "a b\tx y\tt\t-1.0000\n"  # -3 / (2 pieces + EOS); tabs become spaces
    assert row("", "", "t", 0.0, 0) == "\t\tt\t0.0000\n"


def test_an_uninterrupted_run_writes_every_chunk_and_the_merge_is_the_corpus(tmp_path):
    teacher = ScriptedTeacher()
    count, done = translate_chunks(teacher.translate, _chunks(5), tmp_path / "chunks")
    assert (count, done) == (5, 5) and [len(c) for c in teacher.calls] == [5, 5, 5, 5, 3]
    assert merge_chunks(tmp_path / "chunks", count, tmp_path / "teacher.tsv") == 23
    assert (tmp_path / "teacher.tsv").read_text(encoding="utf-8") == _expected()


def _stale_temporary(folder: Path, name: str) -> Path:
    """What `atomic_output` leaves when its process is killed mid-write: a named temporary file of a dead PID."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = folder / f".{name}.{dead.pid}@{socket.gethostname()}.abc123.tmp"
    path.write_text("line 5\tfive line\tref 5\t-0.6", encoding="utf-8")  # half a chunk, no newline
    return path


def test_a_rerun_after_a_kill_mid_chunk_translates_only_the_missing_chunks_and_gives_the_same_bytes(tmp_path):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    count, _ = translate_chunks(ScriptedTeacher().translate, _chunks(5), reference)
    merge_chunks(reference, count, tmp_path / "reference.tsv")
    translate_chunks(ScriptedTeacher().translate, _chunks(5), resumed)
    for index in (1, 3):  # killed while writing chunk 1 (and chunk 3 never written)
        chunk_path(resumed, index).unlink()
    stale = _stale_temporary(resumed, chunk_path(resumed, 1).name)
    teacher = ScriptedTeacher()
    assert translate_chunks(teacher.translate, _chunks(5), resumed) == (5, 2)
    assert [c[0] for c in teacher.calls] == [LINES[5], LINES[15]]  # chunks 1 and 3 only
    assert not stale.exists()  # the dead writer's temporary file is removed
    merge_chunks(resumed, count, tmp_path / "resumed.tsv")
    assert (tmp_path / "resumed.tsv").read_bytes() == (tmp_path / "reference.tsv").read_bytes()


def test_two_ranks_share_the_chunks_round_robin_and_merge_to_the_corpus_of_one(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    count, _ = translate_chunks(ScriptedTeacher().translate, _chunks(5), one)
    merge_chunks(one, count, tmp_path / "one.tsv")
    ranks = [ScriptedTeacher(), ScriptedTeacher()]
    for rank, teacher in enumerate(ranks):
        assert translate_chunks(teacher.translate, _chunks(5), two, rank=rank, world=2)[0] == 5
    assert [[c[0] for c in t.calls] for t in ranks] == [[LINES[0], LINES[10], LINES[20]], [LINES[5], LINES[15]]]
    merge_chunks(two, count, tmp_path / "two.tsv")
    assert (tmp_path / "two.tsv").read_bytes() == (tmp_path / "one.tsv").read_bytes()


def test_a_missing_chunk_is_named_and_nothing_is_merged(tmp_path):
    translate_chunks(ScriptedTeacher().translate, _chunks(5), tmp_path / "c", rank=0, world=2)
    with pytest.raises(UserError, match=r"2 of 5 chunks are missing \(00001.tsv, 00003.tsv\).*rerun") as info:
        merge_chunks(tmp_path / "c", 5, tmp_path / "teacher.tsv")
    assert "\n" not in str(info.value) and not (tmp_path / "teacher.tsv").exists()


def test_the_manifest_refuses_chunks_of_another_translation(tmp_path):
    identity = {"teacher": [{"path": "/t.pt", "bytes": 3}], "decode": {"beam_size": 4}, "chunk_lines": 5}
    check_manifest(tmp_path, identity)
    check_manifest(tmp_path, dict(identity))  # the same: accepted
    with pytest.raises(UserError, match=r"holds chunks of another translation \(chunk_lines, decode differ\)"):
        check_manifest(tmp_path, identity | {"chunk_lines": 6, "decode": {"beam_size": 5}})


def test_the_progress_counts_this_ranks_lines_and_those_done(tmp_path):
    # 23 lines in chunks of 5: sizes 5 5 5 5 3; rank 1 of 2 has chunks 1 and 3 (10 lines), rank 0 has 0, 2, 4 (13)
    assert lines_to_do(23, 5, tmp_path, rank=1, world=2) == (10, 0)
    chunk_path(tmp_path, 4).write_text("x\n")
    assert lines_to_do(23, 5, tmp_path, rank=0, world=2) == (13, 3)
    assert lines_to_do(None, 5, tmp_path, rank=0, world=1) == (None, 0)
