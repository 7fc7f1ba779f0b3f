"""Several models in one server (transformer/benchmarks/serve_pairs.py): a pivoted pair's latency against a direct
pair's, and two pairs under concurrent load, alone and together. Prints JSON.

    python scripts/benchmark_serve_pairs.py --model es-en.pt --model en-es.pt --model en-de.pt \
        --direct es-en --pivoted es-de --load es-en en-es [--clients 8] [--sentences 64] [--text es=FILE ...]

Sentences: the bundled corpus's test books (Spanish and English columns) unless --text LANG=FILE gives a language's
lines. Needs the serve extra.
"""

from __future__ import annotations

import argparse
import json
import lzma
import tempfile
from pathlib import Path

from transformer.benchmarks.serve_load import TEST_BOOKS, start_server, stop_server
from transformer.benchmarks.serve_pairs import pivot_latency, two_pairs
from transformer.benchmarks.stamps import today
from transformer.devices import cpu_name
from transformer.fileio import atomic_output


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs="+", action="append", required=True, metavar="CKPT")
    parser.add_argument("--direct", required=True, help="a pair with a model of its own, e.g. es-en")
    parser.add_argument("--pivoted", required=True, help="a pair served through the pivot, e.g. es-de")
    parser.add_argument("--load", nargs=2, required=True, metavar="PAIR", help="two pairs loaded at once")
    parser.add_argument("--clients", type=int, default=8, help="clients per pair")
    parser.add_argument("--sentences", type=int, default=64, help="sentences per pair and level")
    parser.add_argument("--text", action="append", default=[], metavar="LANG=FILE", help="a language's sentences")
    parser.add_argument("--threads", type=int, default=1, help="the server's torch threads")
    parser.add_argument("--json", help="also write the results here")
    return parser


def _texts(specs: list[str], count: int) -> dict[str, list[str]]:
    with lzma.open(TEST_BOOKS, "rt", encoding="utf-8") as rows:
        columns = [row.rstrip("\n").split("\t") for row in rows]
    texts = {"es": [c[1] for c in columns], "en": [c[2] for c in columns]}
    for spec in specs:
        language, _, path = spec.partition("=")
        texts[language] = Path(path).read_text(encoding="utf-8").splitlines()
    return {language: [line for line in lines if line.strip()][:count] for language, lines in texts.items()}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    texts = _texts(args.text, args.sentences)
    models = [arg for group in args.model for arg in ("--model", *group)]
    pair = lambda label: tuple(label.split("-"))
    with tempfile.TemporaryDirectory() as folder:
        process, port = start_server(models, Path(folder) / "server.log", ["--threads", str(args.threads)])
        try:
            direct, pivoted = pair(args.direct), pair(args.pivoted)
            latency = pivot_latency(port, texts[direct[0]][:32], direct, pivoted)
            work = {pair(label): texts[pair(label)[0]] for label in args.load}
            load = two_pairs(port, work, args.clients)
        finally:
            stop_server(process)
    record = {"kind": "serve_pairs", "device": cpu_name(), "date": today(), "threads": args.threads}
    record |= {"models": args.model, "clients_per_pair": args.clients, "latency": latency, "load": load}
    print(json.dumps(record, indent=1))
    if args.json:
        with atomic_output(args.json) as out:
            json.dump(record, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
