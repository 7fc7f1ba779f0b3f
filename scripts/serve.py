"""Shim for `transformer-serve` (see transformer/commands/cli.py): python scripts/serve.py --help"""

import sys

from transformer.commands.cli import serve_main

if __name__ == "__main__":
    sys.exit(serve_main())
