"""Shim for `transformer-train` (see transformer/commands/cli.py): python scripts/train.py --help"""

import sys

from transformer.commands.cli import train_main

if __name__ == "__main__":
    sys.exit(train_main())
