"""Shim for `transformer-distill` (see transformer/commands/cli.py): python scripts/distill.py --help"""

import sys

from transformer.commands.cli import distill_main

if __name__ == "__main__":
    sys.exit(distill_main())
