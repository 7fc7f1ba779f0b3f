"""Does distillation pay? The measurement of docs/training.md ("Distillation"), end to end (what
scripts/benchmark_distill.py runs), in a work folder; a rerun skips every part already finished (a run is done once
its averaged.pt exists; a killed training resumes from its last checkpoint, a killed translation from its chunks):

1. the teacher: `teacher_config` trained for `teacher_time` of wall time (train.max_time), with `teachers` seeds
   (two: an ensemble), each its last `average_last` checkpoints averaged; or `teacher_checkpoints` as given;
2. the distilled corpus: transformer-distill's translate and filter stages, the teacher at beam `beam`, over the
   student config's data.train (its default filters);
3. the students: the student config (its train.max_steps updates, the same for every student) on (a) the original
   corpus and (b) the distilled one, once per seed of `seeds`, each its last `average_last` checkpoints averaged;
4. scores on the student config's test split (its first `test_lines`, 0 = all), beam `beam`: sacreBLEU BLEU and chrF
   of the teacher and of every student in fp32, and of every distilled student in int8 (Translator.from_checkpoint(
   int8=True)); the sentences per second of the teacher (fp32) and of each int8 student, timed in turns on the same
   machine, the fastest of `rounds` turns;
5. `goals`: mean BLEU of (b) >= mean BLEU of (a) + 1; the int8 students' mean chrF within 1.5 of the teacher's, at
   >= 3x the teacher's sentences per second.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformer.config import Config, DistillConfig, load_config
from transformer.errors import UserError
from transformer.fileio import Interrupted

BLEU_GAIN, CHRF_GAP, SPEEDUP = 1.0, 1.5, 3.0  # the goals


@dataclass(frozen=True)
class Plan:
    """What to measure and where (scripts/benchmark_distill.py's flags)."""

    work: Path
    teacher_config: str = "configs/demo.yaml"
    teacher_set: tuple[str, ...] = ()  # --set overrides of the teacher's training
    teacher_time: str = "1h"
    teachers: int = 1  # seeds 1..teachers: two make an ensemble
    teacher_checkpoints: tuple[str, ...] = ()  # given: no teacher is trained
    student_config: str = "configs/student.yaml"
    student_set: tuple[str, ...] = ()  # --set overrides of every student (and of the corpus the teacher translates)
    distill: DistillConfig = DistillConfig()  # transformer-distill's settings: the filters, original_weight
    seeds: tuple[int, ...] = (1, 2)
    beam: int = 4
    test_lines: int = 0
    rounds: int = 2
    average_last: int = 5
    progress: bool = field(default=False, compare=False)


def train_averaged(config: Config, average_last: int, *, progress: bool = False) -> Path:
    """Train `config` in its train.out_dir (resuming a killed run) and average its last checkpoints into
    averaged.pt there; a run whose averaged.pt exists is done and not touched. Stopped by SIGINT or SIGTERM (the
    trainer saves), `fileio.Interrupted` is raised: the script exits 130 or 143 and a rerun goes on."""
    from transformer.checkpoint import average_checkpoints, numbered_checkpoints, save_checkpoint
    from transformer.training.trainer import Trainer

    out = Path(config.train.out_dir)
    if not (out / "averaged.pt").is_file():
        result = Trainer(config, resume=(out / "checkpoint_last.pt").is_file(), progress=progress).run()
        if result["reason"] in ("SIGINT", "SIGTERM"):  # saved: a rerun resumes it (`timeout` pieces)
            raise Interrupted(signal.Signals[result["reason"]])
        save_checkpoint(average_checkpoints(numbered_checkpoints(out)[-average_last:]), out / "averaged.pt")
    return out / "averaged.pt"


def teacher_checkpoints(plan: Plan) -> list[Path]:
    """The teacher's checkpoints: given, or trained (`teachers` seeds, each for `teacher_time`)."""
    if plan.teacher_checkpoints:
        return [Path(p) for p in plan.teacher_checkpoints]
    found = []
    for seed in range(1, plan.teachers + 1):
        settings = [f"train.max_time={plan.teacher_time}", f"train.seed={seed}", "train.save_every=200"]
        settings += [f"train.keep_last={plan.average_last}", f"train.out_dir={plan.work / f'teacher-s{seed}'}"]
        config = load_config(plan.teacher_config, [*settings, *plan.teacher_set])
        found.append(train_averaged(config, plan.average_last, progress=plan.progress))
    return found


def distill_flags(settings: DistillConfig) -> list[str]:
    """transformer-distill's flags that give `settings`."""
    flags = []
    for name, value in dataclasses.asdict(settings).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else flag.replace("--", "--no-", 1))
        elif value is not None:
            flags += [flag, str(value)]
    return flags


def distilled_corpus(plan: Plan, teachers: list[Path]) -> dict[str, Any]:
    """transformer-distill's translate and filter stages into work/distill: the filters' report and the seconds
    the translate stage took (this run's: next to none when a rerun finds every chunk done)."""
    import json

    from transformer.commands.cli import distill_main

    args = ["--teacher", *map(str, teachers), "--config", plan.student_config, "--out", str(plan.work / "distill")]
    args += [a for s in plan.student_set for a in ("--set", s)] + ["--beam", str(plan.beam), "--no-progress"]
    args += distill_flags(plan.distill)

    def stage(name: str) -> float:
        start = time.perf_counter()
        code = distill_main([*args, "--stage", name])
        if code > 128:  # a signal: its chunks are kept for a rerun
            raise Interrupted(code - 128)
        if code:
            raise UserError(f"transformer-distill --stage {name} failed with exit code {code} (its error is above)")
        return time.perf_counter() - start

    seconds = stage("translate")
    stage("filter")
    report = json.loads((plan.work / "distill" / "filters.json").read_text(encoding="utf-8"))
    return {"translate_seconds": round(seconds, 1), **{k: report[k] for k in ("pairs", "kept", "dropped")}}


def students(plan: Plan) -> dict[str, list[Path]]:
    """Each student's averaged checkpoint: (a) `original` and (b) `distilled`, one per seed."""
    from transformer.training.distillation import DistillPaths, student_config

    base = load_config(plan.student_config, list(plan.student_set))
    distilled = student_config(base, plan.distill, DistillPaths(plan.work / "distill"))
    found: dict[str, list[Path]] = {"original": [], "distilled": []}
    for corpus, config in (("original", base), ("distilled", distilled)):
        for seed in plan.seeds:
            out = plan.work / f"student-{corpus}-s{seed}"
            seeded = config.replace("train", seed=seed, out_dir=str(out), keep_last=plan.average_last)
            found[corpus].append(train_averaged(seeded, plan.average_last, progress=plan.progress))
    return found


def steps(averaged: Path) -> int:
    """The updates of the run whose averaged.pt this is (its checkpoint_last.pt's)."""
    from transformer.checkpoint import load_checkpoint

    return load_checkpoint(averaged.parent / "checkpoint_last.pt", mmap=True)["step"]


def _scores(translator, sources: list[str], references: list[str]) -> dict[str, float]:
    from transformer.evaluation import corpus_scores

    scores = corpus_scores(translator.translate(sources), references)
    return {"bleu": round(scores["bleu"], 2), "chrf": round(scores["chrf"], 2)}


def _fastest(translators: dict[str, Any], sources: list[str], rounds: int) -> dict[str, float]:
    """Sentences per second of each translator over `sources`, in turns, the fastest of `rounds` turns each."""
    best = dict.fromkeys(translators, float("inf"))
    for _ in range(rounds):
        for name, translator in translators.items():
            start = time.perf_counter()
            translator.translate(sources)
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: round(len(sources) / seconds, 2) for name, seconds in best.items()}


def scores(plan: Plan, teachers: list[Path], runs: dict[str, list[Path]]) -> dict[str, Any]:
    """BLEU and chrF of the teacher and of every student (fp32; the distilled ones also int8), and the speeds."""
    from transformer.api import Translator
    from transformer.data.corpus import load_pairs

    config = load_config(plan.student_config, list(plan.student_set))
    sources, references = load_pairs(config.data.test, config.data)
    if plan.test_lines:
        sources, references = sources[: plan.test_lines], references[: plan.test_lines]
    beam = {"beam_size": plan.beam, "nbest": 1}
    teacher = Translator.from_checkpoint([str(p) for p in teachers], device="cpu", **beam)
    result: dict[str, Any] = {"test_sentences": len(sources), "teacher": _scores(teacher, sources, references)}
    for corpus, paths in runs.items():
        result[corpus] = [
            {
                "seed": seed,
                "steps": steps(p),
                **_scores(Translator.from_checkpoint(str(p), **beam), sources, references),
            }
            for seed, p in zip(plan.seeds, paths)
        ]
    int8 = {
        seed: Translator.from_checkpoint(str(p), int8=True, **beam) for seed, p in zip(plan.seeds, runs["distilled"])
    }
    result["distilled_int8"] = [{"seed": seed, **_scores(t, sources, references)} for seed, t in int8.items()]
    speeds = _fastest({"teacher": teacher, **{f"int8 s{seed}": t for seed, t in int8.items()}}, sources, plan.rounds)
    result["teacher"]["sentences_per_s"] = speeds["teacher"]
    for entry in result["distilled_int8"]:
        entry["sentences_per_s"] = speeds[f"int8 s{entry['seed']}"]
    return result


def goals(result: dict[str, Any]) -> dict[str, Any]:
    """The measurement's goals from its scores (module docstring, 5)."""
    mean = lambda runs, key: statistics.mean(r[key] for r in runs)  # noqa: E731
    gain = mean(result["distilled"], "bleu") - mean(result["original"], "bleu")
    gap = result["teacher"]["chrf"] - mean(result["distilled_int8"], "chrf")
    speedup = mean(result["distilled_int8"], "sentences_per_s") / result["teacher"]["sentences_per_s"]
    return {
        "bleu_gain": round(gain, 2),
        "bleu_gain_met": gain >= BLEU_GAIN,
        "int8_chrf_gap": round(gap, 2),
        "int8_chrf_gap_met": gap <= CHRF_GAP,
        "int8_speedup": round(speedup, 2),
        "int8_speedup_met": speedup >= SPEEDUP,
    }


def run(plan: Plan) -> dict[str, Any]:
    """Every step (module docstring) and the record: settings, machine load, figures, goals."""
    from transformer.benchmarks.stamps import today
    from transformer.devices import cpu_name

    load_before = os.getloadavg()
    teachers = teacher_checkpoints(plan)
    corpus = distilled_corpus(plan, teachers)
    runs = students(plan)
    result = scores(plan, teachers, runs)
    settings = {k: v for k, v in dataclasses.asdict(plan).items() if k not in ("work", "progress")}
    return {
        "kind": "distill",
        "date": today(),
        "device": cpu_name(),
        "load_average": {"start": round(load_before[0], 2), "end": round(os.getloadavg()[0], 2)},
        "plan": settings | {"work": str(plan.work)},
        "teacher_checkpoints": [str(p) for p in teachers],
        "teacher_steps": [steps(p) if (p.parent / "checkpoint_last.pt").is_file() else None for p in teachers],
        "distilled_corpus": corpus,
        **result,
        "goals": goals(result),
    }
