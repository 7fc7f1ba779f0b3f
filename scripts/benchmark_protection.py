"""Protected spans measured: software messages with placeholders (the Spanish msgstr of gettext catalogues, e.g.
this machine's /usr/share/locale/es/LC_MESSAGES/*.mo) translated with protection on and off, the share whose
placeholders come out exactly; a test set's BLEU and chrF on and off; time per line (transformer/benchmarks/
protection.py). Prints JSON.

    python scripts/benchmark_protection.py --checkpoint runs/demo/averaged.pt \
        --catalogues /usr/share/locale/es/LC_MESSAGES [--messages 600] [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os

from transformer.benchmarks.protection import catalogue_messages, measure
from transformer.benchmarks.stamps import today
from transformer.commands.cli import user_errors_exit_2
from transformer.data.corpus import load_pairs
from transformer.devices import cpu_name
from transformer.fileio import atomic_output


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--catalogues", default="/usr/share/locale/es/LC_MESSAGES", help="a folder of .mo files")
    parser.add_argument("--messages", type=int, default=600, help="messages drawn (seeded) from the catalogues")
    parser.add_argument("--test-lines", type=int, default=0, help="the first N lines of the test set (0: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier on a shared machine)")
    parser.add_argument("--json", help="also write the record here")
    return parser


@user_errors_exit_2
def main(argv: list[str] | None = None) -> int:
    import torch

    from transformer import Translator

    args = _parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    translator = Translator.from_checkpoint(args.checkpoint)
    messages, names = catalogue_messages(args.catalogues, args.messages)
    sources, references = load_pairs(translator.config.data.test, translator.config.data)
    if args.test_lines:
        sources, references = sources[: args.test_lines], references[: args.test_lines]
    record = {"date": today(), "cpu": cpu_name(), "threads": args.threads, "load_average_at_start": os.getloadavg()}
    record |= {"checkpoint": args.checkpoint, "catalogues": len(names)}
    record |= measure(translator, messages, sources, references)
    text = json.dumps(record, indent=1, ensure_ascii=False)
    print(text)
    if args.json:
        with atomic_output(args.json) as out:
            out.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
