"""A glossary of names and frequent content words built from a parallel test set's sources and references
(transformer/benchmarks/glossary_terms.py: Dice co-occurrence plus a spelling heuristic, competitive linking), for
scripts/benchmark_glossary.py. Prints a JSON summary.

    python scripts/build_glossary.py --config configs/demo.yaml [--split test] --output glossary.tsv
    python scripts/build_glossary.py --src test.es --ref test.en --output glossary.tsv [--min-count 3]
"""

from __future__ import annotations

import argparse
import json

from transformer.benchmarks.glossary import parallel_set
from transformer.benchmarks.glossary_terms import build_terms, glossary_text
from transformer.commands.cli import user_errors_exit_2
from transformer.decoding.glossary import Glossary
from transformer.fileio import atomic_output


@user_errors_exit_2
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="the test set: this config's data.test (or --split valid)")
    parser.add_argument("--split", choices=("test", "valid"), default="test")
    parser.add_argument("--src", help="the test set: source lines (with --ref)")
    parser.add_argument("--ref", help="the test set: reference lines, line-aligned with --src")
    parser.add_argument("--output", required=True, help="the glossary file (TSV) to write")
    parser.add_argument("--min-count", type=int, default=3, help="lines a word and a pair must be in, at least")
    parser.add_argument("--min-dice", type=float, default=0.5, help="a pair's Dice coefficient, at least")
    parser.add_argument("--skip", type=int, default=150, help="each side's most widespread words left out (not names)")
    parser.add_argument("--spelling", type=float, default=0.3, help="weight of the spelling similarity in a score")
    args = parser.parse_args(argv)
    sources, references = parallel_set(args.src, args.ref, args.config, args.split)
    settings = dict(min_count=args.min_count, min_dice=args.min_dice, skip=args.skip, spelling=args.spelling)
    terms = build_terms(sources, references, **settings)
    test_set = f"{args.config} ({args.split})" if args.config else f"{args.src} / {args.ref}"
    header = [
        f"built by scripts/build_glossary.py from {test_set}, {len(sources)} lines: {len(terms)} terms",
        "method: transformer/benchmarks/glossary_terms.py; " + ", ".join(f"{k} {v}" for k, v in settings.items()),
    ]
    with atomic_output(args.output) as out:
        out.write(glossary_text(terms, header))
    names = sum(cased for _, _, cased in terms)
    loaded = Glossary.load(args.output)  # what transformer-translate --glossary will read
    summary = {"output": args.output, "lines": len(sources), "terms": len(loaded), "names": names, **settings}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
