"""The data path at WMT scale: time and peak memory of `transformer-prepare` and of a trainer's start-up.

Each measurement runs the command in a fresh Python process (`PROBE`) on a given source tree (this checkout, or an
older one unpacked elsewhere, to compare), which reports its wall time and two peak resident set sizes from
`getrusage`: the process itself (RUSAGE_SELF: reading, SentencePiece, writing) and its largest waited-for child
(RUSAGE_CHILDREN: the encoding processes). The corpora are synthetic (scripts/make_synthetic_corpus.py, seeded
from the bundled corpus): WMT-like lengths and millions of distinct words. scripts/benchmark_prepare.py runs it;
the figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
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
    settings = [f"data.train={split('train')}", f"data.valid={split('valid')}", "data.test=null", "data.src_lang=es",
                "data.tgt_lang=en", f"data.cache_dir={cache}", f"data.num_proc={num_proc}"]  # fmt: skip
    return ["--config", "wmt14_en_de_base", *(a for s in settings for a in ("--set", s))]


def trainer_overrides(out_dir: Path) -> list[str]:
    """A tiny model's 2 updates, no validation: what the trainer holds at start-up, not what a model needs."""
    settings = ["model.d_model=32", "model.n_heads=2", "model.d_ff=64", "model.n_encoder_layers=1",
                "model.n_decoder_layers=1", "train.max_steps=2", "train.max_tokens=1024", "train.update_tokens=1024",
                "train.valid_every=0", "train.valid_bleu=false", "train.threads=1", "data.valid=null",
                f"train.out_dir={out_dir}"]  # fmt: skip
    return ["--no-progress", *(a for s in settings for a in ("--set", s))]


def measure(source: Path, entry: str, args: list[str]) -> dict:
    """Run `transformer.commands.cli.<entry>(args)` from the tree `source` in a fresh process: its time and peaks."""
    env = {**os.environ, "PYTHONPATH": str(source), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    start = time.perf_counter()
    # run from `source`: `python -c` puts the working folder first on sys.path, ahead of PYTHONPATH
    run = subprocess.run([sys.executable, "-c", PROBE, entry, *args], env=env, cwd=source, capture_output=True,
                         text=True)  # fmt: skip
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
