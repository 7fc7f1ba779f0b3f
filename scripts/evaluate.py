"""Shim for `transformer-evaluate` (see transformer/cli.py): python scripts/evaluate.py --help"""

import sys

from transformer.cli import evaluate_main

if __name__ == "__main__":
    sys.exit(evaluate_main())
