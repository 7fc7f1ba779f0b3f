"""Run a command as if on a slower CPU (transformer/benchmarks/throttle.py says how, and what it does not imitate).

    python scripts/slow_cpu.py --speed 0.3 -- make demo
    python scripts/slow_cpu.py --updates-per-second 2.42 -- make demo

2.42 updates per second is the reference workload's training rate (configs/demo.yaml's shape, fixed in
throttle.py) on the slower CPU that the stand-in imitates, read from its `make demo`
(docs/benchmarks.md#the-stand-in-for-a-slower-cpu).
"""

from __future__ import annotations

import argparse
import sys

from transformer.benchmarks.throttle import calibrate, run_throttled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    speed = parser.add_mutually_exclusive_group(required=True)
    speed.add_argument("--speed", type=float, help="the fraction of this CPU to give the command, in (0, 1]")
    speed.add_argument(
        "--updates-per-second",
        type=float,
        help="the reference workload's training rate to imitate (calibrated here: 3 probes, about 3 minutes; "
        "benchmarks/throttle.py)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    fraction = args.speed
    if args.updates_per_second:
        fraction, readings = calibrate(args.updates_per_second)
        said = ", ".join(f"{rate:.2f} updates/s at speed {speed:.3f}" for speed, rate in readings)
        print(f"slow_cpu: the reference workload trains at {said}; speed {fraction:.3f}", file=sys.stderr)
    if not 0 < fraction <= 1:
        parser.error(f"--speed must be in (0, 1], got {fraction}")
    return run_throttled(command, fraction)


if __name__ == "__main__":
    sys.exit(main())
