"""`make gpu-report`: every GPU figure in priority order within a budget, each step capped, recorded and skipped once
recorded for this commit and GPU (transformer/benchmarks/gpu_report.py).

    python scripts/gpu_report.py --budget 9m      # on a GPU machine; run it again until nothing is left
    python scripts/gpu_report.py --cpu-smoke --results /tmp/r   # tiny, on the CPU
"""

import sys

from transformer.benchmarks.gpu_report import main

if __name__ == "__main__":
    sys.exit(main())
