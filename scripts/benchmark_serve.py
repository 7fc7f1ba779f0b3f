"""Load benchmark of transformer-serve against Translator.translate (transformer/benchmarks/serve_load.py).

    python scripts/benchmark_serve.py --checkpoint runs/demo/checkpoint_last.pt [--clients 1 8 32]
        [--sentences 96] [--rounds 2] [--threads N] [--json out.json]

Needs the serve extra. Prints a Markdown table (docs/serving.md keeps the measured one, with its machine).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from dataclasses import asdict
from pathlib import Path

import torch

from transformer.benchmarks.serve_load import (
    book_sentences,
    median_levels,
    python_api,
    run_clients,
    start_server,
    stop_server,
    table,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--sentences", type=int, default=96, help="sentences per level")
    parser.add_argument("--rounds", type=int, default=2, help="repeats, interleaved; medians are reported")
    parser.add_argument("--threads", type=int, default=0, help="torch threads, the server's and this process's alike")
    parser.add_argument("--server-args", default="", help="extra transformer-serve flags, e.g. '--batch-wait-ms 10'")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    from transformer import Translator

    if args.threads:
        torch.set_num_threads(args.threads)
    server_args = args.server_args.split() + (["--threads", str(args.threads)] if args.threads else [])
    sentences = book_sentences(args.sentences)
    translator = Translator.from_checkpoint(args.checkpoint, device="cpu")
    languages = (translator.config.data.src_lang, translator.config.data.tgt_lang)
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            process, port = start_server(args.checkpoint, Path(tmp) / f"server{r}.log", server_args)
            run_clients(port, sentences[:8], 4, languages)  # warm-up, not counted
            levels = [run_clients(port, sentences, n, languages) for n in args.clients]
            assert stop_server(process) == 0
            translator.translate(sentences[:8])  # warm-up
            rounds.append(levels + python_api(translator, sentences))
            print(f"round {r + 1}:\n{table(rounds[-1])}\n", flush=True)
    levels = median_levels(rounds)
    machine = f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.machine()}"
    print(f"median of {args.rounds} round(s), {len(sentences)} sentences each; {machine}:\n{table(levels)}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(x) for x in levels], indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
