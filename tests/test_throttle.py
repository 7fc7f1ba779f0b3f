"""The slower-CPU stand-in (benchmarks/throttle.py, scripts/slow_cpu.py): a throttled command gets at most its share
of the wall time, its exit code comes back, and the calibration times real training."""

from __future__ import annotations

import importlib.util
import resource
import sys
import time
from pathlib import Path

import pytest

from transformer.benchmarks.throttle import calibrate, reference_update_rate, run_throttled

ROOT = Path(__file__).resolve().parents[1]

BUSY = "import time\ns = time.process_time()\nwhile time.process_time() - s < 0.6: pass"  # 0.6 s of CPU


def test_a_throttled_command_uses_at_most_its_share_of_the_wall_time():
    """At speed 0.3 the command runs in 30% of each period: its CPU time over the wall time stays near 0.3 (less
    on a busy machine, never much more)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    assert run_throttled([sys.executable, "-c", BUSY], 0.3) == 0
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert cpu >= 0.6 and cpu / wall <= 0.4


def test_the_exit_code_and_signals_come_back():
    assert run_throttled([sys.executable, "-c", "raise SystemExit(3)"], 0.5) == 3
    assert run_throttled([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], 0.5) == 143


@pytest.mark.parametrize("speed", [0.0, -0.5, 1.5])
def test_speed_outside_0_1_is_refused(speed):
    with pytest.raises(ValueError, match="speed must be in"):
        run_throttled([sys.executable, "-c", "pass"], speed)


def _slow_cpu_script():
    spec = importlib.util.spec_from_file_location("slow_cpu_script", ROOT / "scripts" / "slow_cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _machine(full: float, bonus: float, noise=(1.0,)):
    """A stub probe: `full` updates/s unthrottled, `bonus` times its share under the throttle, the throttled
    readings scaled in turn by `noise`."""
    scale = iter(noise * 10)
    return lambda speed, cache: full if speed == 1 else full * bonus * speed * next(scale)


def test_the_calibration_corrects_the_share_by_the_throttled_readings():
    """10 updates/s unthrottled and 10% more than its share throttled: asking 2.2 first runs at 0.22 (2.42 read),
    then at 0.2 (2.2 read); the speed is 0.2 and the readings come back. With readings off by +-5% in turn, the
    mean of the two throttled readings cancels it (the last alone would not)."""
    speed, readings = calibrate(2.2, measure=_machine(10.0, 1.1))
    assert speed == pytest.approx(0.2) and [s for s, _ in readings] == pytest.approx([1.0, 0.22, 0.2])
    assert [r for _, r in readings] == pytest.approx([10.0, 2.42, 2.2])
    assert calibrate(2.2, measure=_machine(10.0, 1.1, (1.05, 0.95)))[0] == pytest.approx(0.2, rel=1e-3)
    assert calibrate(50.0, measure=_machine(10.0, 1.1))[0] == 1.0  # slower than asked: the whole CPU


def test_slow_cpu_gives_the_command_the_share_that_brings_the_reference_to_the_asked_rate(monkeypatch, capsys):
    """The README's `python scripts/slow_cpu.py --updates-per-second 2.42 -- make demo`, with the calibration
    stubbed (a share of 0.25, from two readings) and a short command in place of the demo."""
    script = _slow_cpu_script()
    monkeypatch.setattr(script, "calibrate", lambda rate: (0.25, [(1.0, 10.0), (0.25, 2.5)]))
    assert script.main(["--updates-per-second", "2.5", "--", sys.executable, "-c", "raise SystemExit(4)"]) == 4
    said = "reference workload trains at 10.00 updates/s at speed 1.000, 2.50 updates/s at speed 0.250; speed 0.250"
    assert said in capsys.readouterr().err
    assert script.main(["--speed", "1", "--", sys.executable, "-c", "pass"]) == 0


@pytest.mark.slow
def test_the_reference_rate_is_measured_by_real_training(monkeypatch, tmp_path):
    """The calibration trains the reference shape (on the tiny config's corpus here, prepared once) and times updates
    10..30 (the probe's default: 50..150), throttled too. On one thread: two OpenMP pools, the probe's and another
    test's (the suite runs two at a time), would slow each other down far more than the throttle does."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    rate = reference_update_rate("tiny", steps=30, warmup=10, cache=str(tmp_path))
    assert 0.1 < rate < 1000
    throttled = reference_update_rate("tiny", steps=30, warmup=10, cache=str(tmp_path), speed=0.5)
    assert throttled < rate  # slower in wall time
