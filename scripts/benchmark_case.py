"""Input in any case on a checkpoint: a test set as written, in ALL CAPS and in Title Case (chrF, BLEU, loops), and
single words and 2-3 word fragments of its source side in the three casings (loops, outputs too long)
(transformer/benchmarks/case.py). Prints JSON.

    python scripts/benchmark_case.py --checkpoint runs/demo/averaged.pt --config configs/demo.yaml \
        [--split test] [--count 200] [--seed 1] [--beam 4] [--set max_ngram_repeats=0] [--no-test-set] \
        [--timing-rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json

import torch

from transformer.api import Translator
from transformer.benchmarks.case import TEST_SET_CASINGS, fragments_by_casing, test_set_report, time_run_limit
from transformer.benchmarks.glossary import parallel_set
from transformer.benchmarks.stamps import today
from transformer.commands.cli import user_errors_exit_2
from transformer.devices import cpu_name
from transformer.fileio import atomic_output

DECODE_KEYS = ("beam_size", "alpha", "max_len_a", "max_len_b", "max_ngram_repeats", "fold_capitals")


@user_errors_exit_2
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--config", required=True, help="the test set: this config's data.test (or --split valid)")
    parser.add_argument("--split", choices=("test", "valid"), default="test")
    parser.add_argument("--count", type=int, default=200, help="single words, and as many 2-3 word fragments (0: none)")
    parser.add_argument("--seed", type=int, default=1, help="draws the words and fragments")
    parser.add_argument("--beam", type=int, help="beam size (default: the checkpoint's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a decode setting, repeatable")
    parser.add_argument("--no-test-set", action="store_true", help="only the words and fragments")
    parser.add_argument(
        "--casings", nargs="+", choices=TEST_SET_CASINGS, default=TEST_SET_CASINGS, help="the test set's casings"
    )
    parser.add_argument("--timing-rounds", type=int, default=0, help="time the run limit: turns without and with")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    sources, references = parallel_set(None, None, args.config, args.split)
    decode = {key: json.loads(value) for key, value in (item.split("=", 1) for item in args.set)}
    if args.beam:
        decode["beam_size"] = args.beam
    translator = Translator.from_checkpoint(args.checkpoint, device="cpu", **decode)
    settings = translator.config.decode
    result = {
        "kind": "case",
        "device": cpu_name(),
        "threads": torch.get_num_threads(),
        "date": today(),
        "checkpoint": args.checkpoint,
        "case_augmentation": translator.config.data.case_augmentation,
        "decode": {k: getattr(settings, k) for k in DECODE_KEYS} | decode,
    }
    if args.count:
        result["fragments"] = fragments_by_casing(translator, sources, args.count, args.seed)
    if not args.no_test_set:
        result["test_set"] = {"lines": len(sources), **test_set_report(translator, sources, references, args.casings)}
    if args.timing_rounds:
        result["run_limit_time"] = time_run_limit(translator, sources, args.timing_rounds)
    print(json.dumps(result, indent=1, ensure_ascii=False))
    if args.json:
        with atomic_output(args.json) as out:
            json.dump(result, out, indent=1, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
