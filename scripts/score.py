"""Shim for `transformer-score` (see transformer/commands/cli.py): python scripts/score.py --help"""

import sys

from transformer.commands.cli import score_main

if __name__ == "__main__":
    sys.exit(score_main())
