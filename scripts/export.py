"""Shim for `transformer-export` (see transformer/cli.py): python scripts/export.py --help"""

import sys

from transformer.cli import export_main

if __name__ == "__main__":
    sys.exit(export_main())
