"""A slower CPU on a fast one: a command run with its processes stopped for part of every short period.

    python scripts/slow_cpu.py --speed 0.3 -- make demo
    python scripts/slow_cpu.py --updates-per-second 2.42 -- make demo   # calibrated on the demo's own training

The command runs in a process group of its own; every `PERIOD` seconds the group gets SIGCONT, runs for `speed` of
the period, then SIGSTOP for the rest. Every stage (setup, data preparation, training, beam search) then takes
1 / speed times as long in wall time, while the command's own clocks (the demo's time budget) run on: a machine that
is `speed` times as fast, as far as CPU-bound work goes. What it does not imitate: another machine's memory and
cache sizes, its instruction set (an AVX2-only CPU is slower for some kernels than for others), and waiting on the
network or the disk, which the stops slow down too.

`--updates-per-second R` picks the speed from a probe: `REFERENCE_STEPS` updates of the reference workload on this
machine, unthrottled, timed from their metrics (start-up excluded); speed = R / the rate measured. The reference
workload is the demo's training as the slower machine was measured with it (`REFERENCE_SHAPE`: d_model 256, d_ff
512, configs/demo.yaml's shape then and on 2026-11-25), fixed here so that the stand-in stays the same machine when
the demo's configs change.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PERIOD = 0.02  # seconds per run/stop cycle: short against a training update (0.1-0.5 s) and a beam-search batch
REFERENCE_STEPS = 150  # probe updates; the rate is measured over those after the first 50
REFERENCE_SHAPE = ("model.d_model=256", "model.n_heads=4", "model.d_ff=512", "model.n_encoder_layers=2",
                   "model.n_decoder_layers=1", "data.vocab_size=4000", "train.max_tokens=1200",
                   "train.update_tokens=1000")  # fmt: skip


def run_throttled(command: list[str], speed: float, period: float = PERIOD) -> int:
    """Run `command` at `speed` (0 < speed <= 1) of this CPU; returns its exit code (128 + N for signal N)."""
    if not 0 < speed <= 1:
        raise ValueError(f"speed must be in (0, 1], got {speed}")
    child = subprocess.Popen(command, start_new_session=True)
    try:
        while child.poll() is None and speed < 1:
            time.sleep(period * speed)
            _signal_group(child.pid, signal.SIGSTOP)
            time.sleep(period * (1 - speed))
            _signal_group(child.pid, signal.SIGCONT)
        return _exit_code(child.wait())
    except KeyboardInterrupt:  # pass Ctrl-C on, running, so the command can clean up
        _signal_group(child.pid, signal.SIGCONT)
        _signal_group(child.pid, signal.SIGINT)
        return _exit_code(child.wait())


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the command has just ended
        os.killpg(pid, sig)


def _exit_code(status: int) -> int:
    return 128 - status if status < 0 else status


def reference_update_rate(config: str = "demo", steps: int = REFERENCE_STEPS) -> float:
    """Training updates per second of the reference workload (`config` in `REFERENCE_SHAPE`) on this machine,
    unthrottled: updates 50..`steps` of a fresh run."""
    with tempfile.TemporaryDirectory() as out:
        overrides = [*REFERENCE_SHAPE, f"train.max_steps={steps}", "train.max_time=null", "train.valid_every=0",
                     "train.log_every=50", "train.valid_bleu=false", "train.save_every=0", f"train.out_dir={out}",
                     f"data.cache_dir={out}/cache"]  # fmt: skip
        command = [sys.executable, "-m", "transformer", "train", "--config", config, "--no-progress"]
        command += [arg for item in overrides for arg in ("--set", item)]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        records = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    elapsed = {r["step"]: r["elapsed"] for r in records if "elapsed" in r and "valid_loss" not in r}
    return (steps - 50) / (elapsed[steps] - elapsed[50])
