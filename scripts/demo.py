"""`make demo`: train on the bundled Bible corpus, then translate and score the held-out test books.

    python scripts/demo.py --config configs/demo.yaml --out runs/demo --budget 15m --started-at EPOCH_SECONDS

The budget is a total: everything from `--started-at` (`make demo` passes the time before `make setup`) to the
scores fits in it. Stages, each visible and each header showing the budget left: SentencePiece training and
encoding (cached); training with a progress bar for whatever is left once the work after it has been estimated
(`transformer/training/budget.py`; `--time` fixes it instead), writing the checkpoints that the paper's
averaging needs; their average, <out>/averaged.pt (`--average 1`: the final checkpoint alone); `transformer-evaluate
--checkpoint <out>/averaged.pt` itself (beam search over the whole test split, hypotheses in
<out>/averaged.test.hyp, sacreBLEU's report); Spanish test verses beside the reference and the model's English,
then BLEU and chrF. Uses a GPU when there is one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import textwrap
import time
from pathlib import Path

from transformer.commands.cli import user_errors_exit_2
from transformer.errors import UserError

# Below this many updates of configs/demo.yaml in the time training has, configs/demo_small.yaml (then d_model 192,
# 1.4-1.45x the updates in the same time) learns more: on the dev books it leads while updates are few and falls
# behind when they are many, the difference crossing zero near 4,500. Near that crossing the two are within about a
# point, while one idle machine's probe can read 15% apart in two runs: so the small preset is taken only below the
# crossing less that spread, and a machine near the crossing keeps demo.yaml whichever way its probe wanders.
# Re-measured with demo_small at lr 3e-3, the two tie from 4,000 updates up, so the threshold stays; the preset's
# d_model 160 (since) scores at least as well as 192 at the threshold's time (the runs behind each figure:
# docs/benchmarks.md#the-demo-presets-and-their-threshold, docs/benchmarks.md#the-update-rate-probe).
SMALL_PRESET_BELOW = round(4500 * (1 - 0.15))  # 3,825
# The trainer makes fewer updates than the probe's rate times its time: it also validates every 500 updates, writes
# checkpoints, logs, and collates ahead on a thread that shares the two cores (made / predicted in demo runs:
# docs/benchmarks.md#the-update-rate-probe).
TRAINER_SHARE = 0.9

# The paper's checkpoint averaging (section 6.1: the base models averaged the last 5 checkpoints, written at
# 10-minute intervals): the demo writes a checkpoint every AVERAGE_EVERY of its training time and scores the mean of
# the last AVERAGE_LAST, the final one included. Chosen on the dev books (docs/demo-tuning.md, "Averaging"): the
# last 3 of `demo_small` 250 updates apart (0.07 of 3,500) scored 20.8 dev BLEU against 19.3 for the last alone and
# 19.6 for the last 3 750 apart.
AVERAGE_LAST = 3
AVERAGE_EVERY = 0.07


def _banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def _show_examples(sources: list[str], references: list[str], hypotheses: list[str], count: int, src_lang: str) -> None:
    step = max(len(sources) // count, 1)
    width = max(len(src_lang), 3)
    for i in range(0, step * count, step)[:count]:
        for label, text in ((src_lang, sources[i]), ("ref", references[i]), ("mt", hypotheses[i])):
            label = f"{label:<{width}}"
            indent = " " * (width + 3) + "| "
            print(textwrap.fill(text, width=110, initial_indent=f"  {label} | ", subsequent_indent=indent))
        print()


def _seconds_per_sentence(config, data, device, sample: int = 64) -> float:
    """The evaluation's beam search (a `StreamingEngine` with the config's decode settings, on the device evaluate
    picks) timed now, on this machine, with the untrained model over `sample` test sentences spread through the
    split. Untrained, it runs every sentence to the maximum length (budget.TRAINED_RATIO corrects it)."""
    import torch

    from transformer.data.tokenizer import PAD_ID
    from transformer.decoding.streaming import StreamingEngine
    from transformer.model.transformer import Transformer

    sources = list(data.splits["test"].src_text)
    sources = sources[:: max(len(sources) // sample, 1)][:sample]
    tokenizer = data.tokenizer
    model = Transformer.from_config(
        config.model, src_vocab_size=tokenizer.src_vocab_size, tgt_vocab_size=tokenizer.tgt_vocab_size, pad_id=PAD_ID
    )
    translator = StreamingEngine(model.to(device).eval(), tokenizer, config.decode, device=device)
    start = time.perf_counter()
    with torch.random.fork_rng():  # the probe leaves the training run's random state as it was
        translator.translate_texts(sources)
    return (time.perf_counter() - start) / max(len(sources), 1)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/demo.yaml")
    parser.add_argument("--out", default="runs/demo", help="run directory (replaced)")
    parser.add_argument("--budget", default="15m", help="total wall time, setup to scores, e.g. 15m or 30m")
    parser.add_argument("--started-at", type=float, help="when the budget began, in epoch seconds (default: now)")
    parser.add_argument("--time", help="train exactly this long (e.g. 11m) instead of what the budget leaves")
    parser.add_argument(
        "--small-config",
        help="a smaller preset to train instead when --config would make fewer than "
        f"{SMALL_PRESET_BELOW:,} updates in the time it has (probed on this machine)",
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--examples", type=int, default=5, help="test verses to show")
    parser.add_argument(
        "--average",
        type=int,
        default=AVERAGE_LAST,
        help="score the average of the last N checkpoints (the final one included; 1 = the final checkpoint alone)",
    )
    parser.add_argument(
        "--average-every",
        type=float,
        default=AVERAGE_EVERY,
        help="the averaged checkpoints' spacing, as a share of the training time",
    )
    return parser


def _after_training(config, data, device) -> float:
    """Seconds to keep for the work after training: the final validation and the test split's beam search, as
    estimated on this machine now (budget.estimate_after_training)."""
    from transformer.training.budget import estimate_after_training
    from transformer.training.calibration import KINDS, NEGATIVES

    probe = _seconds_per_sentence(config, data, device)
    pairs = len(data.splits["valid"]) if "valid" in data.splits else 0
    valid = min(config.train.valid_bleu_sentences or pairs, pairs) if config.train.valid_bleu else 0  # greedy BLEU
    calibrated = min(config.train.confidence_lines, pairs)  # the confidence's calibration (of the final model or
    valid += calibrated + len(KINDS) * min(calibrated, NEGATIVES)  # the average): its lines and synthetic inputs
    return estimate_after_training(len(data.splits["test"]), probe_seconds_per_sentence=probe, valid_sentences=valid)


def _preset(args, config, data, device, seconds: float):
    """(the config to train, a line saying why, its update rate): --small-config when --config would make
    fewer than `SMALL_PRESET_BELOW` updates in `seconds`, its update rate probed on this machine now: the median of
    three readings (budget.update_rates)."""
    from transformer.config import load_config
    from transformer.training.budget import update_rates

    rates = update_rates(config, data, device)
    rate = statistics.median(rates)
    readings = ", ".join(f"{r:.1f}" for r in rates)
    updates = rate * seconds * TRAINER_SHARE
    expected = f"{rate:.1f} updates/s here (median of {readings}): about {updates:,.0f} updates"
    if not args.small_config or updates >= SMALL_PRESET_BELOW:
        return config, f"{args.config} ({expected})", rate
    small = load_config(args.small_config, [f"train.out_dir={args.out}", *args.overrides])
    small_rate = statistics.median(update_rates(small, data, device))  # probed too: its prediction is checked
    why = (
        f"{args.small_config} ({args.config} would train {expected}, fewer than {SMALL_PRESET_BELOW:,}: the "
        f"smaller model learns more; it trains {small_rate:.1f} updates/s)"
    )
    return small, why, small_rate


def _steps_to_average(steps: list[int], last: int, every: float) -> list[int]:
    """The final step and the `last` - 1 before it, newest first, each at least half an interval (`every` of the
    training, in updates) before the one kept after it: a timed checkpoint written just before the final one (the
    clock's last tick) is passed over. Returned oldest first."""
    gap = every * steps[-1] / 2
    chosen = [steps[-1]]
    for step in reversed(steps[:-1]):
        if len(chosen) < last and chosen[-1] - step >= gap:
            chosen.append(step)
    return chosen[::-1]


def _average(out: Path, last: int, every: float, config) -> tuple[Path, list[int]]:
    """The paper's checkpoint averaging (section 6.1): <out>/averaged.pt, the mean of the final checkpoint and the
    ones before it that `_steps_to_average` picks, with its own confidence calibration on the validation split
    (training/calibration.py; none when train.confidence_lines is 0). Returns the path and the steps averaged."""
    from transformer.checkpoint import average_checkpoints, numbered_checkpoints, save_checkpoint
    from transformer.devices import pick_device
    from transformer.training.calibration import calibrate_state

    found = {int(p.stem.split("_")[1]): p for p in numbered_checkpoints(out)}
    steps = _steps_to_average(sorted(found), last, every)
    averaged, state = out / "averaged.pt", average_checkpoints([found[s] for s in steps])
    if config.train.confidence_lines and config.data.valid is not None:
        lines = config.train.confidence_lines
        state = calibrate_state(state, config, lines=lines, device=pick_device())
    save_checkpoint(state, averaged)
    return averaged, steps


def _score_test(args, config, result: dict, budget, checkpoint: Path, extra: dict) -> int:
    """Stages 3 and 4: `transformer-evaluate --checkpoint <checkpoint> --json <out>/scores.json` itself
    (cli.evaluate_main: beam search over the test split, its hypotheses next to the checkpoint, its report), then a
    few test verses from its hypotheses file and its BLEU and chrF; evaluate's exit code."""
    from transformer.commands.cli import evaluate_main
    from transformer.data.corpus import load_pairs

    out = Path(args.out)
    scores_json = out / "scores.json"
    _banner(
        f"3. Translating and scoring the held-out test books: transformer-evaluate --checkpoint {checkpoint} "
        f"(beam {config.decode.beam_size}; {budget.describe()})"
    )
    code = evaluate_main(["--checkpoint", str(checkpoint), "--json", str(scores_json)])
    if code:
        return code  # evaluate has said why
    record = json.loads(scores_json.read_text(encoding="utf-8"))
    sources, references = load_pairs(config.data.test, config.data)  # what evaluate translated, in order
    hypotheses = Path(record["hypotheses"]).read_text(encoding="utf-8").splitlines()

    _banner(f"4. Scores on {len(references)} test verses ({budget.describe()})")
    _show_examples(sources, references, hypotheses, args.examples, config.data.src_lang)
    record |= {
        "updates": result["step"],
        "reason": result["reason"],
        "train_minutes": result["elapsed"] / 60,
        "total_minutes": budget.elapsed() / 60,
        "budget_minutes": budget.total / 60,
        **extra,
    }
    scores_json.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    since = "setup included" if args.started_at else "since this script started"
    print(f"BLEU {record['bleu']:.1f}  {record['bleu_signature']}")  # the shipped model's: the last BLEU line
    print(f"chrF {record['chrf']:.1f}  {record['chrf_signature']}")
    print(
        f"total {record['total_minutes']:.1f} min of the {args.budget} budget ({since}); {checkpoint.name}, its "
        f"hypotheses, scores.json and curves.png in {args.out}"
    )
    return 0


@user_errors_exit_2
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    import shutil

    from transformer.config import load_config, parse_duration
    from transformer.data.prepare import prepare_data
    from transformer.devices import pick_device
    from transformer.training.budget import TimeBudget
    from transformer.training.trainer import Trainer

    budget = TimeBudget(total=parse_duration(args.budget), started=args.started_at or time.time())
    config = load_config(args.config, [f"train.out_dir={args.out}", *args.overrides])
    shutil.rmtree(args.out, ignore_errors=True)
    device = pick_device()  # as transformer-evaluate picks it: CUDA when present

    _banner(f"1. SentencePiece vocabulary and data ({budget.describe()}, {device})")
    data = prepare_data(config)
    if "test" not in data.splits:
        raise UserError(f"{args.config} has no data.test split to score the demo on")
    after = _after_training(config, data, device)
    training_time = lambda: parse_duration(args.time) if args.time else budget.training_seconds(after=after)
    config, preset, rate = _preset(args, config, data, device, training_time())
    seconds = training_time()  # what is left once the probes are done
    config = config.replace("train", max_time=f"{seconds:.1f}s")
    if args.average > 1:  # a checkpoint every AVERAGE_EVERY of the training time, the last `average` kept
        config = config.replace(
            "train", save_every=0, save_every_minutes=args.average_every * seconds / 60, keep_last=args.average + 1
        )
    train_config = config.replace("train", confidence_lines=0) if args.average > 1 else config  # the average's
    expected = rate * seconds * TRAINER_SHARE  # as _preset predicted, for the time left after the probes

    _banner(
        f"2. Training {preset} for {seconds / 60:.1f} min ({budget.describe()}; {after / 60:.1f} min kept for scoring)"
    )
    result = Trainer(train_config).run()
    made = result["step"]
    print(
        f"trained {made:,} updates in {result['elapsed'] / 60:.1f} min ({result['reason']}); the probe predicted "
        f"{expected:,.0f} for that time ({(made - expected) / max(expected, 1):+.1%})"
    )
    checkpoint, extra = Path(args.out) / "checkpoint_last.pt", {"predicted_updates": round(expected)}
    if args.average > 1:
        checkpoint, steps = _average(Path(args.out), args.average, args.average_every, config)
        print(f"averaged the checkpoints of updates {', '.join(f'{s:,}' for s in steps)} into {checkpoint}")
        extra["averaged_updates"] = steps
    return _score_test(args, config, result, budget, checkpoint, extra)


if __name__ == "__main__":
    sys.exit(main())
