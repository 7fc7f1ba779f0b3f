"""Language identification measured: each candidate library (or transformer-serve's own detector, `ours`) on
held-out lines of each language, ordinary, short (1-5 words) and with names and numbers; accuracy restricted to
the served languages and over each library's own, time per line (transformer/benchmarks/detection.py). Prints JSON.

    python scripts/benchmark_detection.py --candidates ours py3langid lingua --count 300 [--wmt DIR] [--json out.json]

The Spanish and English lines are the bundled corpus's test books (data/bible-es-en/test.tsv.xz, held out of
training); --wmt DIR adds German from DIR/dev.de (a newstest set, Moses-tokenized: its escapes are undone).
"""

from __future__ import annotations

import argparse
import html
import json
import lzma
import resource
from pathlib import Path

from transformer.benchmarks.detection import CANDIDATES, held_out, load_and_measure
from transformer.benchmarks.stamps import today
from transformer.commands.cli import user_errors_exit_2
from transformer.devices import cpu_name
from transformer.fileio import atomic_output

BIBLE = Path(__file__).resolve().parents[1] / "data" / "bible-es-en" / "test.tsv.xz"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", nargs="+", default=["ours"], choices=["ours", *CANDIDATES])
    parser.add_argument("--count", type=int, default=300, help="texts of each kind per language")
    parser.add_argument("--wmt", help="a folder with dev.de: German held-out lines")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the results here")
    return parser


def _lines(wmt: str | None) -> dict[str, list[str]]:
    with lzma.open(BIBLE, "rt", encoding="utf-8") as rows:
        columns = [row.rstrip("\n").split("\t") for row in rows]
    lines = {"es": [c[1] for c in columns], "en": [c[2] for c in columns]}
    if wmt:
        text = (Path(wmt) / "dev.de").read_text(encoding="utf-8")
        lines["de"] = [html.unescape(line) for line in text.splitlines()]
    return lines


@user_errors_exit_2
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    lines = _lines(args.wmt)
    served = sorted(lines)
    sets = held_out(lines, args.count, args.seed)
    results = []
    for name in args.candidates:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = load_and_measure(name, sets, served)
        result["peak_rss_added_mb"] = round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, 1)
        results.append(result)
        print(json.dumps(result), flush=True)
    record = {"kind": "detection", "device": cpu_name(), "date": today(), "served": served, "count": args.count}
    record |= {"results": results, "examples": {kind: {k: v[:3] for k, v in s.items()} for kind, s in sets.items()}}
    if args.json:
        with atomic_output(args.json) as out:
            json.dump(record, out, indent=1, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
