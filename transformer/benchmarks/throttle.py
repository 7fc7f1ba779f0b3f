"""A slower CPU on a fast one: a command run with its processes stopped for part of every short period.

    python scripts/slow_cpu.py --speed 0.3 -- make demo
    python scripts/slow_cpu.py --updates-per-second 2.42 -- make demo   # calibrated on the demo's own training

The command runs in a process group of its own; every `PERIOD` seconds the group gets SIGCONT, runs for `speed` of
the period, then SIGSTOP for the rest. Every stage (setup, data preparation, training, beam search) then takes
1 / speed times as long in wall time, while the command's own clocks (the demo's time budget) run on: a machine that
is `speed` times as fast, as far as CPU-bound work goes. What it does not imitate: another machine's memory and
cache sizes, its instruction set (an AVX2-only CPU is slower for some kernels than for others), and waiting on the
network or the disk, which the stops slow down too.

`--updates-per-second R` picks the speed from probes (`calibrate`): `REFERENCE_STEPS` updates of the reference
workload, timed from their metrics (start-up excluded), once unthrottled and then twice under the throttle, each
time at the speed the readings so far give; the speed is R over the throttled readings' mean rate per unit of
speed (a throttled run is a little faster than its share: measured, not assumed). The reference
workload is the demo's training as the slower machine was measured with it (`REFERENCE_SHAPE`: d_model 256, d_ff
512, configs/demo.yaml's shape then: docs/benchmarks.md#the-stand-in-for-a-slower-cpu), fixed here so that the
stand-in stays the same machine when the demo's configs change.
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
CALIBRATION_ROUNDS = 2  # probes under the throttle after the unthrottled one (`calibrate`)
REFERENCE_SHAPE = (
    "model.d_model=256",
    "model.n_heads=4",
    "model.d_ff=512",
    "model.n_encoder_layers=2",
    "model.n_decoder_layers=1",
    "data.vocab_size=4000",
    "train.max_tokens=1200",
    "train.update_tokens=1000",
)


def run_throttled(command: list[str], speed: float, period: float = PERIOD, **popen) -> int:
    """Run `command` at `speed` (0 < speed <= 1) of this CPU; returns its exit code (128 + N for signal N).
    popen: more arguments for `subprocess.Popen` (stdout, stderr)."""
    if not 0 < speed <= 1:
        raise ValueError(f"speed must be in (0, 1], got {speed}")
    child = subprocess.Popen(command, start_new_session=True, **popen)
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


def reference_update_rate(
    config: str = "demo",
    steps: int = REFERENCE_STEPS,
    speed: float = 1.0,
    cache: str | None = None,
    warmup: int = 50,
) -> float:
    """Training updates per second of the reference workload (`config` in `REFERENCE_SHAPE`) on this machine at
    `speed` (wall time, so a throttled run counts its stops): updates `warmup`..`steps` of a fresh run (`steps` a
    multiple of `warmup`). cache: a folder for the prepared data, to share between probes (default: a new one)."""
    with tempfile.TemporaryDirectory() as out:
        overrides = [
            *REFERENCE_SHAPE,
            f"train.max_steps={steps}",
            "train.max_time=null",
            "train.valid_every=0",
            f"train.log_every={warmup}",
            "train.valid_bleu=false",
            "train.save_every=0",
            f"train.out_dir={out}",
            f"data.cache_dir={cache or out + '/cache'}",
        ]
        command = [sys.executable, "-m", "transformer", "train", "--config", config, "--no-progress"]
        command += [arg for item in overrides for arg in ("--set", item)]
        code = run_throttled(command, speed, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if code:
            raise subprocess.CalledProcessError(code, command)
        records = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    elapsed = {r["step"]: r["elapsed"] for r in records if "elapsed" in r and "valid_loss" not in r}
    return (steps - warmup) / (elapsed[steps] - elapsed[warmup])


def calibrate(
    updates_per_second: float, rounds: int = CALIBRATION_ROUNDS, measure=reference_update_rate
) -> tuple[float, list[tuple[float, float]]]:
    """The speed at which the reference workload trains at `updates_per_second` here, and the readings behind it,
    [(speed, updates/s measured at it), ...]. The first reading is unthrottled; the next `rounds` run under the
    throttle, each at the speed that the throttled readings so far give. Stopping the processes slows them by less
    than the share (they run faster while they run: docs/benchmarks.md#the-stand-in-for-a-slower-cpu), so the
    speed comes from the throttled readings alone: R / the mean of their rate per unit of speed. At most 1."""

    def speed_for(readings: list[tuple[float, float]]) -> float:
        per_speed = [rate / speed for speed, rate in readings[1:]] or [readings[0][1]]
        return min(updates_per_second * len(per_speed) / sum(per_speed), 1.0)

    with tempfile.TemporaryDirectory() as cache:  # the data is prepared once, by the first probe
        readings = [(1.0, measure(speed=1.0, cache=cache))]
        for _ in range(rounds):
            speed = speed_for(readings)
            readings.append((speed, measure(speed=speed, cache=cache)))
    return speed_for(readings), readings
