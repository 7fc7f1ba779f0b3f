"""`make gpu-check`: every CUDA path once on a tiny model, one PASS/FAIL line each (logic: transformer/benchmarks/
gpu_check.py).

python scripts/gpu_check.py               # on a GPU machine (without CUDA: one line, exit 0)
python scripts/gpu_check.py --cpu-smoke   # the same checks on the CPU, tiny
"""

import sys

from transformer.benchmarks.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
