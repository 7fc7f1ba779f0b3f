"""The slower-CPU stand-in (benchmarks/throttle.py): a throttled command gets at most its share of the wall time, and
its exit code comes back."""

from __future__ import annotations

import resource
import sys
import time

import pytest

from transformer.benchmarks.throttle import run_throttled

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
