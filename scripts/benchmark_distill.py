"""Does distillation pay? Teacher, distilled corpus, students on the original and the distilled corpus, scores and
int8 speed, in one resumable run (transformer/benchmarks/distill.py has the steps; docs/training.md, "Distillation").

    python scripts/benchmark_distill.py --work runs/distill-bench                 # demo.yaml teacher, 1 hour
    python scripts/benchmark_distill.py --work runs/distill-bench --teachers 2    # an ensemble of two (2 hours)
    python scripts/benchmark_distill.py --work W --teacher runs/demo/averaged.pt  # a teacher already trained

A rerun with the same --work skips what is done (killed trainings resume, a killed translation keeps its chunks).
Writes the record to --json (default docs/results/distill/distill.json) and prints it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from transformer.benchmarks.distill import Plan, run
from transformer.benchmarks.stamps import write_json
from transformer.commands.cli import user_errors_exit_2
from transformer.config import DistillConfig


@user_errors_exit_2
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, help="the folder of every run (resumed when rerun)")
    parser.add_argument("--teacher", nargs="+", default=[], help="the teacher's checkpoint(s): none is trained")
    parser.add_argument("--teacher-config", default="configs/demo.yaml")
    parser.add_argument("--teacher-time", default="1h", help="each teacher's training time (train.max_time)")
    parser.add_argument("--teachers", type=int, default=1, help="teachers trained (seeds 1..N): 2 = an ensemble")
    parser.add_argument("--teacher-set", action="append", default=[], metavar="K=V", help="teacher config override")
    parser.add_argument("--student-config", default="configs/student.yaml")
    parser.add_argument("--student-set", action="append", default=[], metavar="K=V", help="student config override")
    parser.add_argument("--min-length-ratio", type=float, default=DistillConfig.min_length_ratio, help="a filter")
    parser.add_argument("--max-length-ratio", type=float, default=DistillConfig.max_length_ratio, help="a filter")
    parser.add_argument("--min-score", type=float, help="a filter: teacher log-probability per piece (default: off)")
    parser.add_argument("--original-weight", type=float, default=0.0, help="original pairs beside the distilled")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2], help="one student per seed and corpus")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--test-lines", type=int, default=0, help="the test split's first N lines (0 = all)")
    parser.add_argument("--rounds", type=int, default=2, help="timing turns; the fastest counts")
    parser.add_argument("--average-last", type=int, default=5, help="checkpoints averaged per run")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--json", default="docs/results/distill/distill.json", help="where the record goes")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    plan = Plan(
        work=Path(args.work),
        teacher_config=args.teacher_config,
        teacher_set=tuple(args.teacher_set),
        teacher_time=args.teacher_time,
        teachers=args.teachers,
        teacher_checkpoints=tuple(args.teacher),
        student_config=args.student_config,
        student_set=tuple(args.student_set),
        distill=DistillConfig(
            min_length_ratio=args.min_length_ratio,
            max_length_ratio=args.max_length_ratio,
            min_score=args.min_score,
            original_weight=args.original_weight,
        ),
        seeds=tuple(args.seeds),
        beam=args.beam,
        test_lines=args.test_lines,
        rounds=args.rounds,
        average_last=args.average_last,
    )
    given = sys.argv[1:] if argv is None else argv
    record = run(plan) | {"command": " ".join(["python", "scripts/benchmark_distill.py", *given])}
    record["threads"] = torch.get_num_threads()
    write_json(Path(args.json), record)
    print(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
