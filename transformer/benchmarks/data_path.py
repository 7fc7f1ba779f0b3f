"""The data path at WMT scale: time and peak memory of `transformer-prepare` and of a trainer's start-up.

Each measurement runs the command in a fresh Python process (`PROBE`) on a given source tree (this checkout, or an
older one unpacked elsewhere, to compare), which reports its wall time and two peak resident set sizes from
`getrusage`: the process itself (RUSAGE_SELF: reading, SentencePiece, writing) and its largest waited-for child
(RUSAGE_CHILDREN: the encoding processes). The corpora are synthetic (scripts/make_synthetic_corpus.py, seeded
from the bundled corpus): WMT-like lengths and millions of distinct words. scripts/benchmark_prepare.py runs it;
the figures are in docs/benchmarks.md. `start_ranks` starts the trainer under torchrun instead and reads each rank's
memory from /proc while it runs: its peak RSS, and how much of it is its own (private) rather than pages it shares
with the other rank (the cache's memory-mapped arrays, read by both).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Runs one command's entry point and prints its time and peak memory as the last line (a JSON object).
PROBE = """
import json, resource, sys, time
start = time.perf_counter()
from transformer.commands import cli
code = getattr(cli, sys.argv[1])(sys.argv[2:])
gb = lambda who: resource.getrusage(who).ru_maxrss / 1e6
print("BENCH " + json.dumps({"seconds": time.perf_counter() - start, "code": code,
      "main_gb": gb(resource.RUSAGE_SELF), "worker_gb": gb(resource.RUSAGE_CHILDREN)}))
"""


def make_corpus(pairs: int, folder: Path) -> Path:
    """`folder` with train.es/.en (`pairs` synthetic pairs) and valid.es/.en, made once from the bundled corpus."""
    if (folder / "train.en").is_file() and (folder / "valid.en").is_file():
        return folder
    from transformer.data.corpus import read_lines

    folder.mkdir(parents=True, exist_ok=True)
    rows = [line.split("\t") for line in read_lines(ROOT / "data/bible-es-en/train.tsv.xz")]
    (folder / "seed.es").write_text("\n".join(r[1] for r in rows) + "\n", "utf-8")
    (folder / "seed.en").write_text("\n".join(r[2] for r in rows) + "\n", "utf-8")
    script = ROOT / "scripts/make_synthetic_corpus.py"
    command = [sys.executable, str(script), "--src", str(folder / "seed.es"), "--tgt", str(folder / "seed.en")]
    subprocess.run([*command, "--pairs", str(pairs), "--out", str(folder)], check=True)
    return folder


def data_overrides(corpus: Path, cache: Path, num_proc: int) -> list[str]:
    """configs/wmt14_en_de_base.yaml's data settings (37k joint BPE, 2M sentences for SentencePiece, ratio 1.5) on
    the synthetic corpus."""
    split = lambda name: f"{{src: {corpus / f'{name}.es'}, tgt: {corpus / f'{name}.en'}}}"
    settings = [
        f"data.train={split('train')}",
        f"data.valid={split('valid')}",
        "data.test=null",
        "data.src_lang=es",
        "data.tgt_lang=en",
        f"data.cache_dir={cache}",
        f"data.num_proc={num_proc}",
    ]
    return ["--config", "wmt14_en_de_base", *(a for s in settings for a in ("--set", s))]


def trainer_overrides(out_dir: Path) -> list[str]:
    """A tiny model's 2 updates, no validation: what the trainer holds at start-up, not what a model needs."""
    settings = [
        "model.d_model=32",
        "model.n_heads=2",
        "model.d_ff=64",
        "model.n_encoder_layers=1",
        "model.n_decoder_layers=1",
        "train.max_steps=2",
        "train.max_tokens=1024",
        "train.update_tokens=1024",
        "train.valid_every=0",
        "train.valid_bleu=false",
        "train.threads=1",
        "data.valid=null",
        f"train.out_dir={out_dir}",
    ]
    return ["--no-progress", *(a for s in settings for a in ("--set", s))]


def measure(source: Path, entry: str, args: list[str]) -> dict:
    """Run `transformer.commands.cli.<entry>(args)` from the tree `source` in a fresh process: its time and peaks."""
    env = {**os.environ, "PYTHONPATH": str(source), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    start = time.perf_counter()
    # run from `source`: `python -c` puts the working folder first on sys.path, ahead of PYTHONPATH
    run = subprocess.run(
        [sys.executable, "-c", PROBE, entry, *args], env=env, cwd=source, capture_output=True, text=True
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("BENCH ")]
    if run.returncode or not lines:
        raise RuntimeError(f"{entry} failed ({run.returncode}): {run.stderr.strip()[-2000:]}")
    stages = [line.split("] ")[-1] for line in run.stderr.splitlines() if "peak memory so far" in line]
    return {**json.loads(lines[-1][6:]), "wall": time.perf_counter() - start, "stages": stages}


def prepare_and_start(source: Path, corpus: Path, work: Path, num_proc: int) -> dict:
    """Prepare `corpus` into a fresh cache under `work`, then start a trainer on it: both measurements."""
    cache, out = work / "cache", work / "run"
    prepared = measure(source, "prepare_main", data_overrides(corpus, cache, num_proc))
    started = measure(source, "train_main", [*data_overrides(corpus, cache, num_proc), *trainer_overrides(out)])
    return {"prepare": prepared, "trainer": started}


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid`, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _memory_kb(pid: int) -> dict[str, int]:
    """Peak RSS (VmHWM), RSS, PSS and private kB of a live process; {} once it is gone."""
    try:
        status = (Path(f"/proc/{pid}/status").read_text() + Path(f"/proc/{pid}/smaps_rollup").read_text()).split()
    except OSError:
        return {}
    field = lambda name: int(status[status.index(name) + 1])
    return {
        "peak": field("VmHWM:"),
        "rss": field("Rss:"),
        "pss": field("Pss:"),
        "private": field("Private_Clean:") + field("Private_Dirty:"),
    }


def start_ranks(source: Path, corpus: Path, cache: Path, out: Path, num_proc: int, ranks: int) -> dict:
    """A trainer's start-up under `torchrun --nproc_per_node ranks` (gloo, on the CPU) on an encoded `cache` of
    `corpus`: wall time, and each rank's peak RSS, peak PSS and peak private memory (GB), sampled every 0.1 s."""
    env = {**os.environ, "PYTHONPATH": str(source), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    args = [*data_overrides(corpus, cache, num_proc), *trainer_overrides(out)]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(ranks),
        "--master_port",
        str(29600 + os.getpid() % 300),
        "-m",
        "transformer",
        "train",
        *args,
    ]
    peaks: dict[int, dict[str, int]] = defaultdict(dict)
    start = time.perf_counter()
    with tempfile.TemporaryFile() as log, subprocess.Popen(command, env=env, cwd=source, stdout=log, stderr=log) as run:
        while run.poll() is None:
            for pid in _children(run.pid):  # torchrun's own process is the agent; the ranks are its children
                for key, kb in _memory_kb(pid).items():
                    peaks[pid][key] = max(peaks[pid].get(key, 0), kb)
            time.sleep(0.1)
        if run.returncode:
            log.seek(0)
            raise RuntimeError(f"torchrun failed ({run.returncode}): {log.read().decode(errors='replace')[-2000:]}")
    seen = [{key: kb / 1e6 for key, kb in peak.items()} for peak in peaks.values() if peak]
    return {"seconds": time.perf_counter() - start, "ranks": sorted(seen, key=lambda peak: -peak["peak"])}
