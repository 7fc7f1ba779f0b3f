"""Steered decoding on a config's test split (docs/decoding.md, the table): constraints from the reference (its
rarest one or two words by training-target frequency), n-gram blocking, against plain beam search.

    python scripts/benchmark_steering.py --checkpoint runs/demo/checkpoint_last.pt --config configs/demo.yaml \
        [--split valid] [--stride 5] [--lines 400] [--beam 4] [--constraint-beam 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json

import torch

from transformer.api import Translator
from transformer.benchmarks.stamps import cpu_name, today
from transformer.benchmarks.steering import compare, rarest_words, word_counts
from transformer.config import load_config
from transformer.data.corpus import load_pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--config", required=True, help="its data.train (word counts) and data.test (the lines)")
    parser.add_argument("--split", choices=("test", "valid"), default="test", help="the lines: data.test or data.valid")
    parser.add_argument("--lines", type=int, default=0, help="the first N test lines (0 = all), after --stride")
    parser.add_argument("--stride", type=int, default=1, help="every K-th test line (spread over the test books)")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument(
        "--constraint-beam",
        type=int,
        help="the lines' beam with constraints: max(--beam, this) "
        "(default: the checkpoint's decode.constraint_beam_size)",
    )
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    config = load_config(args.config)
    _, train_targets = load_pairs(config.data.train, config.data)
    sources, references = load_pairs(getattr(config.data, args.split), config.data)
    sources, references = sources[:: args.stride], references[:: args.stride]
    if args.lines:
        sources, references = sources[: args.lines], references[: args.lines]
    constraints = rarest_words(references, word_counts(train_targets))
    wide = {"constraint_beam_size": args.constraint_beam} if args.constraint_beam else {}
    translator = Translator.from_checkpoint(args.checkpoint, device="cpu", beam_size=args.beam, **wide)._engine(1)
    result = {
        "kind": "steering",
        "device": cpu_name(),
        "date": today(),
        "checkpoint": args.checkpoint,
        "split": args.split,
        "stride": args.stride,
        "beam": args.beam,
        "constraint_beam": max(args.beam, translator.settings.constraint_beam_size),
        **compare(translator, sources, references, constraints),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
