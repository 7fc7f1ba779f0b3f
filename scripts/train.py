"""Shim for `transformer-train` (see transformer/cli.py): python scripts/train.py --help"""

import sys

from transformer.cli import train_main

if __name__ == "__main__":
    sys.exit(train_main())
