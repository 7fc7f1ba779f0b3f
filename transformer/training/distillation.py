"""Sequence-level knowledge distillation (Kim & Rush, 2016): a teacher translates the training corpus and a student
learns from its translations. The stages of transformer-distill, each runnable on its own, over one folder DIR:

    translate   the teacher (a checkpoint, an ensemble, an imported Marian model) translates the source side of the
                student config's data.train with its search settings, in chunks (distill_chunks.py: resumable,
                sharded), merged into DIR/teacher.tsv
    filter      DIR/teacher.tsv -> DIR/distilled.tsv without the pairs the filters drop (distill_filters.py), their
                counts in DIR/filters.json
    train       the student config trained on DIR/distilled.tsv (columns 0, 1: source, teacher output), beside the
                original pairs when `original_weight` > 0 (a `corpora:` split: each original pair that many times
                per epoch), in DIR/student (resumed when it holds a checkpoint; its config also in DIR/student.yaml)
    average     the student's last `average_last` numbered checkpoints averaged into DIR/student/averaged.pt

Under torchrun every process runs every stage: translate shares the chunks (rank r takes r, r + W, ...) and rank 0
merges them once every rank is done; filter and average run on rank 0 while the others wait; train is the
trainer's own DDP. The waits use a gloo group with the student config's `train.prepare_timeout`, as the ranks that
wait while rank 0 prepares data do. Files that would come out the same are not rewritten (teacher.tsv, distilled.tsv),
so a rerun of every stage after a kill keeps the student's encoded data cache (keyed by the files' size and time).
"""

from __future__ import annotations

import dataclasses
import filecmp
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from transformer.checkpoint import average_checkpoints, load_checkpoint, numbered_checkpoints, save_checkpoint
from transformer.config import Config, DistillConfig, SplitConfig, from_dict, parse_duration, save_config
from transformer.data.corpus import count_lines, stream_pairs
from transformer.errors import UserError
from transformer.fileio import Interrupted, write_text
from transformer.training.distill_chunks import check_manifest, chunk_path, lines_to_do, merge_chunks, translate_chunks
from transformer.training.distill_filters import filter_corpus
from transformer.training.distributed import barrier, init_distributed, prepare_group

log = logging.getLogger(__name__)

STAGES = ("translate", "filter", "train", "average")


@dataclass(frozen=True)
class DistillPaths:
    """Where each stage writes, in one folder."""

    out: Path

    chunks = property(lambda self: self.out / "chunks")  # 00000.tsv, ..., manifest.json
    teacher = property(lambda self: self.out / "teacher.tsv")  # every pair: source, output, target, score
    distilled = property(lambda self: self.out / "distilled.tsv")  # the pairs kept, the same columns
    filters = property(lambda self: self.out / "filters.json")  # what each filter dropped
    student_config = property(lambda self: self.out / "student.yaml")
    student = property(lambda self: self.out / "student")  # the student's run directory
    averaged = property(lambda self: self.out / "student" / "averaged.pt")


@dataclass(frozen=True)
class Processes:
    """This process's place among those torchrun started (rank 0 of 1 without torchrun), and the group waited on."""

    rank: int = 0
    world: int = 1
    group: Any = None

    def wait(self) -> None:
        """Every process reaches this point before any goes on (nothing to wait for alone)."""
        if self.world > 1:
            barrier(self.group)


def join_processes(config: Config) -> Processes:
    """Under torchrun (WORLD_SIZE set): join the process group (gloo on the CPU, NCCL on GPUs, one per process)
    and a gloo group whose waits last up to train.prepare_timeout; else one process."""
    if "WORLD_SIZE" not in os.environ:
        return Processes()
    rank, world, _ = init_distributed()
    group = prepare_group(parse_duration(config.train.prepare_timeout)) if world > 1 else None
    return Processes(rank, world, group)


def source_lines(split: SplitConfig) -> int | None:
    """The pairs of a plain or TSV split (its first max_examples), for the progress bar; None for other kinds."""
    if split.kind not in ("tsv", "parallel"):
        return None
    lines = count_lines(split.tsv or split.src)
    return lines if split.max_examples is None else min(lines, split.max_examples)


def translate_corpus(
    translator,
    config: Config,
    settings: DistillConfig,
    paths: DistillPaths,
    *,
    identity: dict[str, Any],
    processes: Processes | None = None,
    progress: bool = True,
) -> dict:
    """The translate stage: this process's missing chunks of data.train, then (rank 0) teacher.tsv. identity: what
    manifest.json records; progress: a bar on a terminal."""
    processes = processes or Processes()
    rank, world = processes.rank, processes.world
    check_manifest(paths.chunks, identity)
    train, data, size = config.data.train, config.data, settings.chunk_lines
    total, done = lines_to_do(source_lines(train), size, paths.chunks, rank=rank, world=world)
    enabled = progress and sys.stderr.isatty()
    with tqdm(total=total, initial=done, unit="line", disable=not enabled, dynamic_ncols=True, leave=False) as bar:
        bar.set_description(f"rank {rank}/{world}" if world > 1 else "teacher")
        count, translated = translate_chunks(
            translator.translate,
            stream_pairs(train, data, size),
            paths.chunks,
            rank=rank,
            world=world,
            progress=bar.update,
        )
    processes.wait()  # every rank's chunks written
    rows = _merge(paths, count) if rank == 0 else None
    processes.wait()  # teacher.tsv written
    return {"chunks": count, "translated": translated, "rows": rows}


def _merge(paths: DistillPaths, count: int) -> int:
    """teacher.tsv from the chunks, unless it already holds exactly them (then untouched: its time keys caches)."""
    chunks = [chunk_path(paths.chunks, i) for i in range(count)]
    if chunks and paths.teacher.is_file() and all(c.is_file() for c in chunks):
        size, newest = sum(c.stat().st_size for c in chunks), max(c.stat().st_mtime_ns for c in chunks)
        stat = paths.teacher.stat()
        if stat.st_size == size and stat.st_mtime_ns >= newest:
            with open(paths.teacher, "rb") as f:
                return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))
    return merge_chunks(paths.chunks, count, paths.teacher)


def filter_stage(settings: DistillConfig, paths: DistillPaths) -> dict[str, Any]:
    """The filter stage: distilled.tsv (rewritten only when its rows change) and filters.json; returns the report."""
    if not paths.teacher.is_file():
        raise UserError(f"{paths.teacher} not found: run the translate stage first (--stage translate)")
    fresh = paths.out / ".distilled.tsv.new"
    report = filter_corpus(paths.teacher, fresh, settings)
    if paths.distilled.is_file() and filecmp.cmp(fresh, paths.distilled, shallow=False):
        fresh.unlink()
    else:
        os.replace(fresh, paths.distilled)
    write_text(paths.filters, json.dumps(report, indent=2) + "\n")
    return report


def _split_tree(split: SplitConfig) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(split)))  # tuples as lists, as YAML holds them


def student_config(config: Config, settings: DistillConfig, paths: DistillPaths) -> Config:
    """The student config trained on distilled.tsv (and the original pairs, `original_weight` times), in DIR/student."""
    distilled = SplitConfig(tsv=str(paths.distilled.absolute()), tsv_columns=(0, 1))
    train = distilled
    if settings.original_weight:
        original = dataclasses.replace(config.data.train, weight=settings.original_weight)
        train = SplitConfig(corpora=[distilled, original])
    tree = config.to_dict()
    tree["data"]["train"] = _split_tree(train)
    tree["train"]["out_dir"] = str(paths.student.absolute())
    return from_dict(tree)


def train_stage(config: Config, settings: DistillConfig, paths: DistillPaths, *, progress: bool = True) -> dict:
    """The train stage: the student trained (resumed from DIR/student/checkpoint_last.pt when there is one, and not
    run again once it reached train.max_steps); returns the trainer's result. Stopped by a signal (the trainer then
    saves), it raises `fileio.Interrupted`, so that no later stage runs on a student half trained."""
    from transformer.training.trainer import Trainer

    if not paths.distilled.is_file():
        raise UserError(f"{paths.distilled} not found: run the filter stage first (--stage filter)")
    if not paths.distilled.stat().st_size:
        raise UserError(
            f"the filters kept no pair in {paths.distilled} ({paths.filters} counts what each dropped): loosen them "
            "(--min-length-ratio, --max-length-ratio, --min-score) and rerun --stage filter"
        )
    student = student_config(config, settings, paths)
    save_config(student, paths.student_config)
    last = paths.student / "checkpoint_last.pt"
    if last.is_file():
        step = load_checkpoint(last, mmap=True).get("step", 0)
        if student.train.max_steps and step >= student.train.max_steps:
            return {"step": step, "reason": "already trained"}
    result = Trainer(student, resume=last.is_file(), progress=progress).run()
    if result["reason"] in ("SIGINT", "SIGTERM"):  # saved and stopped: a rerun resumes; nothing after it runs now
        raise Interrupted(signal.Signals[result["reason"]])
    return result


def average_stage(settings: DistillConfig, paths: DistillPaths) -> list[Path]:
    """The average stage: the student's last `average_last` numbered checkpoints into averaged.pt; returns them."""
    found = numbered_checkpoints(paths.student)
    if not found:
        raise UserError(f"no numbered checkpoints in {paths.student}: run the train stage first (--stage train)")
    chosen = found[-settings.average_last :]
    if len(chosen) < settings.average_last:
        log.warning(
            "warning: averaging the %d checkpoints %s holds, not %d (the student config's train.keep_last keeps "
            "that many)",
            len(chosen),
            paths.student,
            settings.average_last,
        )
    save_checkpoint(average_checkpoints(chosen), paths.averaged)
    return chosen
