"""Shim for `transformer-export` (see transformer/commands/cli.py): python scripts/export.py --help"""

import sys

from transformer.commands.cli import export_main

if __name__ == "__main__":
    sys.exit(export_main())
