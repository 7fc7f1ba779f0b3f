"""Run a training recipe to its end in pieces, average the last checkpoints, score the test split, write results.

    python scripts/run_recipe.py --config configs/bible_es_en_paper.yaml               # all pieces, then scores
    python scripts/run_recipe.py --config configs/bible_es_en_paper.yaml --max-pieces 1  # one piece per call

Each piece trains at most --piece (default 8m: with start-up, saving, and the averaging and scoring after the
last piece, one piece fits a 10-minute command) and resumes exactly where the last one stopped (the trainer's
--resume). When the recipe stops (early stopping, max_steps, max_epochs or its max_time), the last --average
checkpoints on the save schedule are averaged, the average translates the config's test split (its decode
settings: beam 4 in the recipes) and sacreBLEU BLEU and chrF with their signatures go to
docs/results/<name>.json (kind "bleu"). With --max-pieces, run the same command again until it writes the results.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from transformer.commands.cli import user_errors_exit_2


@user_errors_exit_2
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="the recipe: a YAML config")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--name", help="results file name (default: the config's file name without .yaml)")
    parser.add_argument("--piece", default="8m", help="training time per piece, e.g. 8m (0 = no time limit)")
    parser.add_argument("--piece-updates", type=int, default=0, help="updates per piece (0 = no limit)")
    parser.add_argument("--max-pieces", type=int, default=0, help="pieces to run in this call (0 = to the end)")
    parser.add_argument("--average", type=int, default=5, help="checkpoints to average (paper: 5 base, 20 big)")
    parser.add_argument("--results-dir", default="docs/results", help="where <name>.json goes")
    parser.add_argument("--no-progress", action="store_true", help="log lines instead of a progress bar")
    args = parser.parse_args(argv)
    if args.average < 1 or args.piece_updates < 0 or args.max_pieces < 0:
        parser.error("--average must be >= 1, --piece-updates and --max-pieces >= 0")
    from transformer.config import parse_duration
    from transformer.training.recipe import run_recipe

    argv = sys.argv[1:] if argv is None else argv
    record = run_recipe(
        args.config,
        args.overrides,
        name=args.name,
        piece_seconds=parse_duration(args.piece),
        piece_updates=args.piece_updates,
        max_pieces=args.max_pieces,
        average_last=args.average,
        results_dir=args.results_dir,
        command=shlex.join(["python", "scripts/run_recipe.py", *argv]),
        progress=not args.no_progress,
    )
    if record is None:
        print("not finished: run the same command again to continue")
    else:
        scores = f"test BLEU {record['test_bleu']:.2f} chrF {record['test_chrf']:.2f}"
        print(
            f"{record['name']}: {record['updates']} updates in {record['train_minutes']:.1f} min, {scores}; "
            f"{args.results_dir}/{record['name']}.json"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
