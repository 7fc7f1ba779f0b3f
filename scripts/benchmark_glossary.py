"""A glossary on a checkpoint and a test set: its target terms in the output without and with it, chrF of the lines
that hold no term (unchanged, expected), and the time ratio (transformer/benchmarks/glossary.py). Prints JSON.

    python scripts/benchmark_glossary.py --checkpoint runs/demo/checkpoint_last.pt --glossary glossary.tsv \
        --config configs/demo.yaml [--split test] [--stride 5] [--lines 400] [--beam 4] [--glossary-beam 4]
        [--threads 1] [--rounds 3] [--json out.json]
    python scripts/benchmark_glossary.py --checkpoint CKPT --glossary glossary.tsv --src test.es --ref test.en
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from transformer.api import Translator
from transformer.benchmarks.glossary import compare, parallel_set
from transformer.benchmarks.stamps import today
from transformer.commands.cli import user_errors_exit_2
from transformer.decoding.glossary import Glossary
from transformer.devices import cpu_name
from transformer.fileio import atomic_output


@user_errors_exit_2
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--glossary", required=True, help="the glossary file (scripts/build_glossary.py writes one)")
    parser.add_argument("--config", help="the test set: this config's data.test (or --split valid)")
    parser.add_argument("--split", choices=("test", "valid"), default="test")
    parser.add_argument("--src", help="the test set: source lines (with --ref)")
    parser.add_argument("--ref", help="the test set: reference lines, line-aligned with --src")
    parser.add_argument("--stride", type=int, default=1, help="every K-th line (spread over the test set)")
    parser.add_argument("--lines", type=int, default=0, help="the first N lines (0 = all), after --stride")
    parser.add_argument("--beam", type=int, help="beam size (default: the checkpoint's)")
    parser.add_argument("--glossary-beam", type=int, help="the beam of lines with terms: max(--beam, this)")
    parser.add_argument("--rounds", type=int, default=2, help="turns of each run; the fastest is reported")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    glossary = Glossary.load(args.glossary)
    sources, references = parallel_set(
        args.src, args.ref, args.config, args.split, stride=args.stride, lines=args.lines
    )
    decode = {"beam_size": args.beam, "glossary_beam_size": args.glossary_beam}
    translator = Translator.from_checkpoint(
        args.checkpoint, device="cpu", **{k: v for k, v in decode.items() if v is not None}
    )
    settings = translator.config.decode
    load = os.getloadavg()[0]
    compared = compare(translator, glossary, sources, references, rounds=args.rounds)
    result = {
        "kind": "glossary",
        "command": " ".join(["python scripts/benchmark_glossary.py", *(argv if argv is not None else sys.argv[1:])]),
        "device": cpu_name(),
        "threads": torch.get_num_threads(),
        "date": today(),
        "checkpoint": args.checkpoint,
        "glossary": args.glossary,
        "beam": settings.beam_size,
        "glossary_beam": max(settings.beam_size, settings.glossary_beam_size),
        "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],  # 1-minute, before and after: others' jobs
        **compared,
    }
    print(json.dumps(result, indent=1))
    if args.json:
        with atomic_output(args.json) as out:
            json.dump(result, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
