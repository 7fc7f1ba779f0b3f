"""Time and peak memory of `transformer-prepare` and of a trainer's start-up on synthetic WMT-like corpora.

    python scripts/benchmark_prepare.py --pairs 1000000 3000000 10000000 [--baseline OLD_TREE --repeat 2] [--ranks 2]

For each size: a synthetic corpus (made once under --work, from the bundled corpus by
scripts/make_synthetic_corpus.py), prepared with configs/wmt14_en_de_base.yaml's data settings into a fresh cache,
then a tiny model trained for 2 updates on it. Peak resident memory comes from getrusage, for the main process and
its largest encoding process. --baseline names another source tree (e.g. `git archive COMMIT | tar -x -C DIR`),
measured in turn with this one (A/B interleaved, --repeat times) for a paired comparison on a shared machine.
--ranks N also starts the trainer under torchrun with N processes on the cache and reads each rank's peak RSS and
how much of it is its own (the cache's pages are shared between the ranks).
Prints one JSON line per measurement and a Markdown table (docs/benchmarks.md keeps the figures).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path

from transformer.benchmarks.data_path import ROOT, make_corpus, prepare_and_start, start_ranks
from transformer.benchmarks.stamps import cpu_name, today


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[1_000_000, 3_000_000, 10_000_000])
    parser.add_argument("--num-proc", type=int, default=2, help="data.num_proc (encoding processes)")
    parser.add_argument("--baseline", type=Path, help="another source tree to measure in turn with this one")
    parser.add_argument("--repeat", type=int, default=1, help="measurements of each tree and size")
    parser.add_argument("--ranks", type=int, default=0, help="also start the trainer under torchrun, N processes")
    parser.add_argument("--work", type=Path, default=ROOT / "runs/benchmark_prepare", help="corpora and caches")
    args = parser.parse_args()
    args.work = args.work.resolve()  # the runs start in each tree's folder
    trees = {"this": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    rows = []
    for pairs in args.pairs:
        corpus = make_corpus(pairs, args.work / f"corpus-{pairs}")
        for attempt in range(args.repeat):
            for name, tree in trees.items() if attempt % 2 == 0 else reversed(trees.items()):
                work = args.work / f"run-{name}-{pairs}"
                shutil.rmtree(work, ignore_errors=True)
                result = {
                    "kind": "prepare",
                    "device": cpu_name(),
                    "date": today(),
                    "tree": name,
                    "pairs": pairs,
                    **prepare_and_start(tree, corpus, work, args.num_proc),
                }
                if args.ranks:
                    result["torchrun"] = start_ranks(
                        tree, corpus, work / "cache", work / "ranks", args.num_proc, args.ranks
                    )
                print(json.dumps(result), flush=True)
                rows.append(result)
                shutil.rmtree(work, ignore_errors=True)
    print(
        "\n| code | pairs | prepare: time | pairs/s | peak RSS main | largest worker | trainer start: time | peak RSS |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in trees:
        for pairs in args.pairs:
            runs = [r for r in rows if r["tree"] == name and r["pairs"] == pairs]
            med = lambda part, key, runs=runs: statistics.median(r[part][key] for r in runs)
            print(
                f"| {name} | {pairs:,} | {med('prepare', 'seconds'):.0f} s | {pairs / med('prepare', 'seconds'):,.0f} "
                f"| {med('prepare', 'main_gb'):.2f} GB | {med('prepare', 'worker_gb'):.2f} GB "
                f"| {med('trainer', 'seconds'):.0f} s | {med('trainer', 'main_gb'):.2f} GB |"
            )


if __name__ == "__main__":
    main()
