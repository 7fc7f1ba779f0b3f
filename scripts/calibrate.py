"""Shim for `transformer-calibrate` (see transformer/commands/cli.py): python scripts/calibrate.py --help"""

import sys

from transformer.commands.cli import calibrate_main

if __name__ == "__main__":
    sys.exit(calibrate_main())
