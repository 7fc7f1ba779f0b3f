"""Shim for `transformer-keys` (see transformer/commands/cli.py): python scripts/keys.py --help"""

import sys

from transformer.commands.cli import keys_main

if __name__ == "__main__":
    sys.exit(keys_main())
