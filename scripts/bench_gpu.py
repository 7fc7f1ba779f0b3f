"""Every GPU training-throughput figure in one command: `make bench-gpu` (its time on a GPU: docs/benchmarks.md).

    python scripts/bench_gpu.py                    # base and big: docs/results/train_<shape>_<gpu>.json + the table
    python scripts/bench_gpu.py --shapes base      # one shape
    python scripts/bench_gpu.py --cpu-smoke --out /tmp/x --docs /tmp/x/benchmarks.md   # the test's tiny CPU run

For each shape it runs scripts/benchmark.py (ours, nn.Transformer and, where `transformers` is installed, HF
Marian, on the same batches of ~25k target tokens, bf16, interleaved rounds; for base also ours under torch.compile;
then a profile of a few steps of each: host operators, GPU kernels, how busy they kept the GPU) in its own process,
writes one JSON per shape, then rewrites the table between the bench-gpu markers of docs/benchmarks.md from every
GPU record in docs/results/. MFU divides by the GPU's dense bf16 peak read from its name
(transformer/benchmarks/gpu_peaks.py: 989 TFLOP/s for an H100 SXM or H200, 756 for an H100 PCIe, ...), which each
record names. Records measured on a CPU never enter the table, and without a GPU this script refuses to run except
with --cpu-smoke.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {  # benchmark.py arguments per shape
    "base": [
        "--config",
        "configs/base.yaml",
        "--vocab",
        "37000",
        "--tokens",
        "25000",
        "--steps",
        "20",
        "--warmup",
        "5",
        "--rounds",
        "2",
        "--profile",
        "5",
    ],
    "big": [
        "--config",
        "configs/big.yaml",
        "--vocab",
        "37000",
        "--tokens",
        "25000",
        "--steps",
        "10",
        "--warmup",
        "3",
        "--rounds",
        "2",
        "--profile",
        "3",
    ],
    "tiny": [
        "--config",
        "configs/tiny.yaml",
        "--vocab",
        "300",
        "--tokens",
        "300",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--profile",
        "1",
    ],
}
COMPILED = {"base"}  # shapes also measured under torch.compile (`train.compile`), its compilation a minute or two
BEGIN, END = "<!-- bench-gpu table: begin -->", "<!-- bench-gpu table: end -->"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def measure(shape: str, out: Path, peers: str) -> Path:
    """Run benchmark.py for one shape in a fresh process; returns the JSON it wrote."""
    tmp = out / f".train_{shape}.json"
    command = [
        sys.executable,
        "scripts/benchmark.py",
        *SHAPES[shape],
        "--shape",
        shape,
        "--peers",
        peers + (",compiled" if shape in COMPILED else ""),
        "--json",
        str(tmp),
    ]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, cwd=ROOT, check=True)
    record = json.loads(tmp.read_text("utf-8"))
    path = out / f"train_{shape}_{slug(record['device'])[:40]}.json"
    tmp.replace(path)
    return path


def _row(r: dict, name: str) -> str:
    e = r["engines"]
    peer = lambda k: f"{e[k]['tokens_per_s']:,.0f}" if k in e else "not run"
    ratio = f"{e['ours']['tokens_per_s'] / e['hf_marian']['tokens_per_s']:.2f}x" if "hf_marian" in e else "-"
    return (
        f"| {r['shape']} | {r['device']} | {r['date']} | {r['tokens_per_update']:,} | "
        f"{e['ours']['tokens_per_s']:,.0f} | {_mfu(r, 'ours')} | {_busy(e['ours'])} | {e['ours']['peak_mem_gb']} | "
        f"{_compiled(r)} | {peer('nn_transformer')} | {peer('hf_marian')} | {ratio} | [{name}](results/{name}) |"
    )


def _mfu(r: dict, engine: str) -> str:
    """The engine's MFU (the record's own `mfu` is ours), of the GPU's peak."""
    if r.get("mfu") is None:
        return "-"
    mfu = r["mfu"] * r["engines"][engine]["tokens_per_s"] / r["engines"]["ours"]["tokens_per_s"]
    return f"{mfu:.1%} of {r['peak_tflops']:g}"


def _busy(engine: dict) -> str:
    """How busy the profiled steps kept the GPU (records before the profile have none)."""
    profile = engine.get("profile") or {}
    return f"{profile['gpu_busy_share']:.0%}" if "gpu_busy_share" in profile else "-"


def _compiled(r: dict) -> str:
    e = r["engines"].get("ours_compiled")
    return f"{e['tokens_per_s']:,.0f} ({_mfu(r, 'ours_compiled')})" if e else "not run"


def table(results: Path) -> str:
    """Markdown rows for every GPU train_throughput record in `results`, newest first."""
    rows = []
    for path in sorted(results.glob("train_*.json")):
        r = json.loads(path.read_text("utf-8"))
        if r.get("kind") != "train_throughput" or r.get("device_type") != "cuda":
            continue  # CPU figures are never shown as GPU ones
        rows.append((r["date"], _row(r, path.name)))
    head = (
        "| shape | GPU | date | target tokens / step | ours tokens/s | MFU (of TFLOP/s) | GPU busy | ours peak GB | "
        "ours compiled tokens/s (MFU) | nn.Transformer tokens/s | HF Marian tokens/s | ours / Marian | record |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    body = "\n".join(row for _, row in sorted(rows, reverse=True)) or "| no GPU run of `make bench-gpu` yet |"
    return f"{head}\n{body}" if rows else body


def update_docs(docs: Path, results: Path) -> None:
    text = docs.read_text("utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"error: {docs} has no '{BEGIN}' ... '{END}' markers; add them where the table goes")
    before, rest = text.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    docs.write_text(f"{before}{BEGIN}\n{table(results)}\n{END}{after}", "utf-8")


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="base,big", help="comma-separated, among base, big")
    parser.add_argument("--peers", default="torch,marian")
    parser.add_argument("--out", default=str(ROOT / "docs" / "results"))
    parser.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shape on the CPU, for the test only")
    args = parser.parse_args()
    if not args.cpu_smoke and not _has_cuda():
        print(
            "error: no CUDA device: make bench-gpu measures GPUs only (scripts/benchmark.py measures a CPU)",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for shape in ["tiny"] if args.cpu_smoke else args.shapes.split(","):
        print(f"wrote {measure(shape, out, args.peers)}")
    update_docs(Path(args.docs), out)
    print(f"updated the table in {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
