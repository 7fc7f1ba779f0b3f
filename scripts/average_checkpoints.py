"""Shim for `transformer-average` (see transformer/commands/cli.py): python scripts/average_checkpoints.py --help"""

import sys

from transformer.commands.cli import average_main

if __name__ == "__main__":
    sys.exit(average_main())
