"""The confidence of a calibrated checkpoint on a test set: its Spearman correlation with sentence chrF beside the
raw mean log-probability's, the shares of test lines and of inputs that are not the source language flagged below
its default threshold, each kind held out of the fit, reliability, time (transformer/benchmarks/confidence.py).
Prints JSON.

    python scripts/benchmark_confidence.py --checkpoint runs/demo/averaged.pt --config configs/demo.yaml \
        [--lines 0] [--negatives 500] [--json out.json]
    python scripts/benchmark_confidence.py --checkpoint CKPT --src test.es --ref test.en   # valid: the config's

The validation split (the config's data.valid, as the calibration used it) is translated again for the baseline's
threshold and the held-out refits; the test split is the config's data.test unless --src/--ref name one.
"""

from __future__ import annotations

import argparse
import json

import torch

from transformer.benchmarks.confidence import measure
from transformer.benchmarks.stamps import today
from transformer.checkpoint import build_model, load_checkpoint
from transformer.commands.cli import user_errors_exit_2
from transformer.config import from_dict, load_config
from transformer.data.corpus import load_pairs, read_lines
from transformer.decoding.confidence import Calibration
from transformer.decoding.streaming import StreamingEngine
from transformer.devices import cpu_name
from transformer.errors import UserError
from transformer.fileio import atomic_output
from transformer.training.calibration import NEGATIVES, fit, fitting_set


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a calibrated checkpoint (transformer-calibrate)")
    parser.add_argument("--config", help="its data.valid and data.test (default: the checkpoint's own config)")
    parser.add_argument("--src", help="the test set: source lines (with --ref)")
    parser.add_argument("--ref", help="the test set: reference lines, line-aligned with --src")
    parser.add_argument("--lines", type=int, default=0, help="the first N test lines (0 = all)")
    parser.add_argument("--negatives", type=int, default=500, help="test lines made into inputs of each kind (0 = all)")
    parser.add_argument("--valid-lines", type=int, default=1000, help="validation pairs, as the calibration used")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", help="also write the results here")
    return parser


@user_errors_exit_2
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    state = load_checkpoint(args.checkpoint)
    calibration = Calibration.from_state(state.get("confidence"))
    if calibration is None:
        raise UserError(f"{args.checkpoint} has no confidence calibration: transformer-calibrate --checkpoint it first")
    config = load_config(args.config, [], base=from_dict(state["config"]))
    if config.data.valid is None or (config.data.test is None and not args.src):
        raise UserError("the config needs data.valid and data.test (or --src/--ref): give --config")
    test = (read_lines(args.src), read_lines(args.ref)) if args.src else load_pairs(config.data.test, config.data)
    test = tuple(list(side[: args.lines or None]) for side in test)
    model, tokenizer, _ = build_model(state)
    translator = StreamingEngine(model, tokenizer, config.decode, calibration=calibration)
    valid_pairs = load_pairs(config.data.valid, config.data)
    valid = fitting_set(translator, *valid_pairs, lines=args.valid_lines, negatives=NEGATIVES)
    refit = fit(valid)
    result = {
        "kind": "confidence",
        "device": cpu_name(),
        "threads": torch.get_num_threads(),
        "date": today(),
        "checkpoint": args.checkpoint,
        "calibration": calibration.about,
        "refit_on_validation_matches": abs(refit.threshold - calibration.threshold) < 1e-6,
        "beam": config.decode.beam_size,
        **measure(translator, calibration, test, valid, negatives=args.negatives),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        with atomic_output(args.json) as out:
            json.dump(result, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
