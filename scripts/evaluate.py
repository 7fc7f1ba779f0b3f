"""Shim for `transformer-evaluate` (see transformer/commands/cli.py): python scripts/evaluate.py --help"""

import sys

from transformer.commands.cli import evaluate_main

if __name__ == "__main__":
    sys.exit(evaluate_main())
