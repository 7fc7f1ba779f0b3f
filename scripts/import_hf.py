"""Shim for `transformer-import` (see transformer/commands/cli.py): python scripts/import_hf.py --help"""

import sys

from transformer.commands.cli import import_main

if __name__ == "__main__":
    sys.exit(import_main())
