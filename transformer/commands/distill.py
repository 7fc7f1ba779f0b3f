"""The work of `transformer-distill` (cli.py calls it; training/distillation.py holds the stages).

The teacher (--teacher: one checkpoint, several for an ensemble, or a checkpoint written by transformer-import)
decodes with its checkpoint's search settings, changed by --beam, --alpha, --max-len-a, --max-len-b and
--max-tokens, always the best hypothesis of a search (never sampling). The student config (--config, --set) names
the corpus (data.train, whose source side the teacher translates) and everything the student trains with; its
train.out_dir is replaced by DIR/student. The settings of config.DistillConfig are flags of the same names.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import typing
from dataclasses import dataclass
from pathlib import Path

from transformer.commands.common import resolve_config
from transformer.commands.flags import config_args
from transformer.commands.parsers import count
from transformer.config import PRECISIONS, Config, DistillConfig, load_config
from transformer.errors import UserError
from transformer.training import distillation
from transformer.training.distillation import STAGES, DistillPaths, Processes, join_processes

log = logging.getLogger(__name__)

SETTING_HELP = {  # DistillConfig's fields (config/sections.py holds their defaults)
    "chunk_lines": "source lines per chunk: each chunk its own file, the unit of resuming and of sharding",
    "drop_empty": "drop pairs whose teacher output is empty (an empty source is always dropped)",
    "drop_copies": "drop pairs whose teacher output equals the source",
    "min_length_ratio": "drop pairs with fewer output words per source word (0 = off)",
    "max_length_ratio": "drop pairs with more output words per source word (0 = off)",
    "min_score": "drop pairs whose teacher log-probability per piece is below this (e.g. -1.5; default: off)",
    "original_weight": "also train on the original pairs, each this many times per epoch (0 = distilled only, "
    "1 = both, 0.5 = half of them)",
    "average_last": "the student's last numbered checkpoints averaged into DIR/student/averaged.pt",
}


def distill_args(parser: argparse.ArgumentParser) -> None:
    """The teacher, the student config, the folder, the stage; the teacher's search; DistillConfig's settings."""
    parser.add_argument(
        "--teacher",
        nargs="+",
        metavar="CKPT",
        help="the teacher's checkpoint(s): several are an ensemble (their probabilities averaged); a checkpoint "
        "from transformer-import too (needed by the translate stage)",
    )
    config_args(parser)
    parser.add_argument("--out", required=True, metavar="DIR", help="the folder every stage reads and writes")
    parser.add_argument("--stage", choices=("all", *STAGES), default="all", help="run one stage, or all in order")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    search = parser.add_argument_group("the teacher's search (default: its checkpoint's decode settings)")
    search.add_argument("--beam", type=count(1), help="beam size K (1 = greedy)")
    search.add_argument("--alpha", type=float, help="length penalty exponent")
    search.add_argument("--max-len-a", type=float, help="maximum output length = a * source length + b")
    search.add_argument("--max-len-b", type=count(0), help="see --max-len-a")
    search.add_argument("--max-tokens", type=count(1), help="source tokens per decoding batch")
    search.add_argument(
        "--device", default="auto", help="auto (CUDA when present; under torchrun one per process), cpu, cuda"
    )
    search.add_argument("--precision", choices=PRECISIONS, help="autocast; default: the teacher's decode.precision")
    search.add_argument("--threads", type=count(0), default=0, help="torch CPU threads (0 = torch's default)")
    settings = parser.add_argument_group("distillation (docs/training.md, Distillation)")
    hints = typing.get_type_hints(DistillConfig)
    for field in dataclasses.fields(DistillConfig):
        flag, default = f"--{field.name.replace('_', '-')}", field.default
        if hints[field.name] is bool:
            settings.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=default, help=SETTING_HELP[field.name]
            )
        else:
            kind = int if hints[field.name] is int else float
            settings.add_argument(flag, type=kind, default=default, metavar="N", help=SETTING_HELP[field.name])


def _check_teachers(paths: list[str] | None, stages: tuple[str, ...]) -> None:
    if "translate" not in stages:
        return
    if not paths:
        raise UserError("the translate stage needs the teacher: give --teacher CKPT [CKPT ...]")
    for path in paths:
        if not Path(path).is_file():
            raise UserError(f"teacher checkpoint not found: {path}")


def _check_languages(teacher: Config, student: Config) -> None:
    """A teacher of the other direction is refused; other language names only warn (imported models may lack them)."""
    ours, theirs = (student.data.src_lang, student.data.tgt_lang), (teacher.data.src_lang, teacher.data.tgt_lang)
    if theirs == ours[::-1]:
        raise UserError(
            f"the teacher translates {theirs[0]}->{theirs[1]} but the student config is {ours[0]}->{ours[1]}: give "
            "a teacher of the student's direction (or swap the student's data.src_lang and data.tgt_lang)"
        )
    if theirs != ours:
        log.warning("warning: the teacher is %s->%s, the student config %s->%s", *theirs, *ours)


def load_teacher(args: argparse.Namespace, student: Config):
    """(decoding.streaming.StreamingEngine, identity for the chunks' manifest) from --teacher and the search flags."""
    import torch

    from transformer.data.corpus import split_identity
    from transformer.decoding.ensemble import load_models
    from transformer.decoding.streaming import StreamingEngine
    from transformer.devices import pick_device
    from transformer.precision import resolve_precision

    device = pick_device(args.device)
    if args.precision:
        resolve_precision(args.precision, device, setting="--precision")
    model, tokenizer, stored = load_models(args.teacher, device)
    _check_languages(stored, student)
    flags = {
        name: getattr(args, name) for name in ("beam", "alpha", "max_len_a", "max_len_b", "max_tokens", "precision")
    }
    decode = resolve_config(stored, argparse.Namespace(**flags)).decode
    decode = dataclasses.replace(decode, nbest=1, sampling=False)
    if args.threads:
        torch.set_num_threads(args.threads)
    teachers = [{"path": str(Path(p).resolve()), "bytes": Path(p).stat().st_size} for p in args.teacher]
    identity = {
        "teacher": [t | {"mtime_ns": Path(t["path"]).stat().st_mtime_ns} for t in teachers],
        "decode": dataclasses.asdict(decode),
        "chunk_lines": args.chunk_lines,
        "source": split_identity(student.data.train),
    }
    return StreamingEngine(model, tokenizer, decode, device=device), identity


@dataclass(frozen=True)
class _Run:
    """What every stage of one run gets."""

    args: argparse.Namespace
    settings: DistillConfig
    config: Config  # the student's, as given (distillation.student_config makes the one trained)
    paths: DistillPaths
    processes: Processes


def _translate(run: _Run) -> str:
    translator, identity = load_teacher(run.args, run.config)
    done = distillation.translate_corpus(
        translator,
        run.config,
        run.settings,
        run.paths,
        identity=identity,
        processes=run.processes,
        progress=run.args.progress,
    )
    here = f" ({done['translated']} translated by this process)" if done["translated"] < done["chunks"] else ""
    return f"translate: {done['chunks']} chunks{here}, {done['rows']} pairs in {run.paths.teacher}"


def _filter(run: _Run) -> str:
    report = distillation.filter_stage(run.settings, run.paths)
    dropped = ", ".join(f"{name} {n}" for name, n in report["dropped"].items())
    return (
        f"filter: kept {report['kept']} of {report['pairs']} pairs (dropped: {dropped}) in {run.paths.distilled}; "
        f"counts in {run.paths.filters}"
    )


def _train(run: _Run) -> str:
    result = distillation.train_stage(run.config, run.settings, run.paths, progress=run.args.progress)
    return f"train: stopped at update {result['step']} ({result['reason']}); checkpoints in {run.paths.student}"


def _average(run: _Run) -> str:
    chosen = distillation.average_stage(run.settings, run.paths)
    return f"average: {len(chosen)} checkpoints into {run.paths.averaged}"


STAGE_WORK = {"translate": _translate, "filter": _filter, "train": _train, "average": _average}
RANK_0_ONLY = ("filter", "average")  # the other processes wait


def run_distill(args: argparse.Namespace) -> int:
    stages = STAGES if args.stage == "all" else (args.stage,)
    _check_teachers(args.teacher, stages)
    settings = DistillConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(DistillConfig)})
    config = load_config(args.config, args.overrides)
    if config.data.train is None:
        raise UserError(
            "the student config has no data.train: the corpus the teacher translates and the student learns"
        )
    args.progress = not args.no_progress
    run = _Run(args, settings, config, DistillPaths(Path(args.out)), join_processes(config))
    for stage in stages:
        alone = stage in RANK_0_ONLY
        line = STAGE_WORK[stage](run) if run.processes.rank == 0 or not alone else None
        if alone:
            run.processes.wait()
        if run.processes.rank == 0:
            print(line, flush=True)
    return 0
