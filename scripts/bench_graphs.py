"""CUDA graphs measured in one run (what a GPU window measures first; `make gpu-report`'s step `graphs`):

    python scripts/bench_graphs.py                 # on a GPU: docs/results/graphs/*.json
    python scripts/bench_graphs.py --cpu-smoke --out /tmp/x    # the tests' tiny CPU run of the same commands

1. Training, base and big (scripts/benchmark.py, ~25k target tokens a step, bf16, 4 batch shapes cycled so that
   the warm-up captures each): ours eager, ours under torch.compile, ours with the whole step captured as a CUDA
   graph per shape (`--peers compiled,graphed`); tokens/s, MFU, peak memory, warm-up seconds (compilation and
   captures) and a profile of each (GPU busy). Records train_graphs_<shape>_<gpu>.json.
2. Decoding, the base shape with random weights, outputs forced to 32 tokens (scripts/benchmark.py decode): ours
   eager, ours with one graph replay a step (graph_search.py), HF `generate`; beam 4 and greedy, fp16 and bf16,
   batches of 32 and of 128 sentences. Records decode_cuda_base_<search>_<compute>[_b128].json.

Each command runs in a process of its own; one that fails is reported and the others still run (exit code 1).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = "base (6+6, d512, ff2048, V8000)"  # the decode records' shape name (gpu_report_steps.BASE_SHAPE)
TRAIN = {
    "base": "--config configs/base.yaml --vocab 37000 --tokens 25000 --steps 10 --warmup 4 --rounds 2 --profile 3",
    "big": "--config configs/big.yaml --vocab 37000 --tokens 25000 --steps 6 --warmup 4 --rounds 2 --profile 2",
}
TRAIN_SMOKE = "--config configs/tiny.yaml --vocab 300 --tokens 300 --steps 2 --warmup 2 --profile 1"
DECODE = "--device cuda --config configs/base.yaml --forced 32 --computes fp16,bf16 --beams 4,1"
DECODE_SMOKE = "--device cpu --config configs/tiny.yaml --vocab 300 --src-len 8 --forced 6 --computes fp32 --threads 1"
BATCHES = {32: 256, 128: 512}  # sentences per batch -> sentences decoded


def commands(out: Path, smoke: bool) -> list[tuple[str, list[str], Path | None]]:
    """(name, command, the JSON the training benchmark writes or None) for every measurement, the most wanted first
    (a window cut short keeps those): decoding in batches of 32, training base, decoding in batches of 128, big."""
    py = [sys.executable, "scripts/benchmark.py"]
    train, decode = {}, {}
    for shape, args in ({"tiny": TRAIN_SMOKE} if smoke else TRAIN).items():
        tmp = out / f".train_graphs_{shape}.json"
        peers = "compiled" if smoke else "compiled,graphed"  # graphed: CUDA only
        command = [*py, *args.split(), "--shapes", "2" if smoke else "4", "--peers", peers, "--shape", shape]
        train[shape] = (f"train {shape}", [*command, "--json", str(tmp)], tmp)
    for batch, sentences in BATCHES.items():
        command = [*py, "decode", *(DECODE_SMOKE if smoke else DECODE).split(), "--batch-size", str(batch)]
        command += ["--sentences", str(16 if smoke else sentences), "--repeats", "1" if smoke else "2"]
        engines, shape = ("ours,ours_graphs", "tiny") if smoke else ("ours,ours_graphs,hf", BASE)
        decode[batch] = (
            f"decode b{batch}",
            [*command, "--engines", engines, "--shape", shape, "--out", str(out)],
            None,
        )
    return [decode[32], *list(train.values())[:1], decode[128], *list(train.values())[1:]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "results" / "graphs"))
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU (the tests)")
    args = parser.parse_args(argv)
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print("bench-graphs: no CUDA device here; nothing measured (--cpu-smoke runs the tiny CPU version)")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name, command, tmp in commands(out, args.cpu_smoke):
        print("$", " ".join(command), flush=True)
        if subprocess.run(command, cwd=ROOT).returncode != 0:
            failed.append(name)
            continue
        if tmp is not None:
            record = json.loads(tmp.read_text("utf-8"))
            device = re.sub(r"[^a-z0-9]+", "-", record["device"].lower()).strip("-")[:40]
            tmp.replace(out / f"train_graphs_{record['shape']}_{device}.json")
    print(
        f"bench-graphs: {len(failed)} failed ({', '.join(failed)})" if failed else "bench-graphs: every figure written"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
