"""`make bench-gpu`'s script on the CPU: a tiny shape writes a well-formed record, and CPU records never enter the
GPU table (the fields docs/benchmarks.md lists for docs/results/)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIELDS = {"kind", "shape", "device", "torch", "date", "command", "tokens_per_update", "engines", "mfu", "peak_tflops"}


def _script():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "scripts" / "bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_cpu_smoke_writes_a_complete_record_and_keeps_it_out_of_the_gpu_table(tmp_path):
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# B\n\n<!-- bench-gpu table: begin -->\nold\n<!-- bench-gpu table: end -->\n\nafter\n")
    command = [
        sys.executable,
        "scripts/bench_gpu.py",
        "--cpu-smoke",
        "--out",
        str(tmp_path),
        "--docs",
        str(docs),
        "--peers",
        "torch",
    ]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=300)
    (path,) = tmp_path.glob("train_tiny_*.json")
    record = json.loads(path.read_text())
    assert record.keys() >= FIELDS
    assert record["kind"] == "train_throughput" and record["shape"] == "tiny" and record["device_type"] == "cpu"
    assert record["mfu"] is None and record["peak_tflops"] is None  # no GPU figure from a CPU
    assert set(record["engines"]) == {"ours", "nn_transformer"}
    for engine in record["engines"].values():
        assert engine["tokens_per_s"] > 0 and "peak_mem_gb" in engine
        profile = engine["profile"]  # where a step's time goes; on a CPU without the GPU's fields
        assert profile["steps"] == 1 and profile["host_ops_per_step"] > 100 and "gpu_busy_ms" not in profile
    assert record["tokens_per_update"] > 0 and "scripts/benchmark.py" in record["command"]
    text = docs.read_text()
    assert "no GPU run of `make bench-gpu` yet" in text and "old" not in text and text.endswith("after\n")


def test_table_shows_gpu_records_only(tmp_path):
    gpu = {
        "kind": "train_throughput",
        "shape": "base",
        "device": "NVIDIA H100 80GB HBM3",
        "device_type": "cuda",
        "date": "2026-11-24",
        "tokens_per_update": 24900,
        "mfu": 0.4123,
        "peak_tflops": 989.0,
        "engines": {
            "ours": {"tokens_per_s": 1_000_000.0, "peak_mem_gb": 20.5, "profile": {"gpu_busy_share": 0.404}},
            "ours_compiled": {"tokens_per_s": 1_200_000.0, "peak_mem_gb": 18.0},
            "hf_marian": {"tokens_per_s": 400_000.0, "peak_mem_gb": 30.1},
        },
    }
    cpu = {**gpu, "device": "cpu (AMD EPYC)", "device_type": "cpu", "mfu": None}
    (tmp_path / "train_base_h100.json").write_text(json.dumps(gpu))
    (tmp_path / "train_base_cpu.json").write_text(json.dumps(cpu))
    rows = [line for line in _script().table(tmp_path).splitlines() if line.startswith("| base")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].split("|")[1:-1]]
    assert cells[1] == "NVIDIA H100 80GB HBM3" and cells[4] == "1,000,000" and cells[5] == "41.2% of 989"
    assert cells[6] == "40%" and cells[8] == "1,200,000 (49.5% of 989)"  # the compiled MFU: 41.23% x 1.2
    assert cells[9] == "not run" and cells[10] == "400,000" and cells[11] == "2.50x"


def test_compiled_peer_is_ours_under_torch_compile():
    """`--peers compiled`: our model wrapped by torch.compile (built lazily: nothing compiles here), whose loss path
    still finds the Transformer inside (optim.batch_loss unwraps it for the output matrix)."""
    import argparse

    import torch

    from transformer.benchmarks.training import build_engines
    from transformer.config import load_config
    from transformer.model.transformer import Transformer
    from transformer.training.optim import _unwrap

    cfg = load_config(str(ROOT / "configs" / "tiny.yaml")).model
    args = argparse.Namespace(vocab=50, device=torch.device("cpu"), compile=False)
    engines = build_engines(args, cfg, {"compiled"})
    assert set(engines) == {"ours", "ours_compiled"} and engines["ours_compiled"].fused
    compiled = engines["ours_compiled"].model
    assert not isinstance(compiled, Transformer) and isinstance(_unwrap(compiled), Transformer)


def test_a_failing_profile_keeps_the_figures(monkeypatch):
    """The profile comes after the timed rounds: where the profiler fails (a device or version it does not know),
    the record keeps the tokens/s and says why the profile is missing."""
    import torch

    from transformer.benchmarks import training
    from transformer.config import load_config

    def broken(*args, **kwargs):
        raise RuntimeError("no profiler here")

    monkeypatch.setattr(training, "profile_steps", broken)
    cfg = load_config(str(ROOT / "configs" / "tiny.yaml")).model
    model = training.Transformer.from_config(cfg, src_vocab_size=50, tgt_vocab_size=50, pad_id=0)
    batches = training.make_batches(3, 60, 50, 6, torch.device("cpu"))
    results = training.measure({"ours": training.Engine(model, True)}, batches, "fp32", torch.device("cpu"), 1, 1, 1)
    assert results["ours"]["tokens_per_s"] > 0
    assert results["ours"]["profile"] == {"error": "RuntimeError: no profiler here"}
    assert training.profile_line(results["ours"]["profile"]) == "failed (RuntimeError: no profiler here)"
