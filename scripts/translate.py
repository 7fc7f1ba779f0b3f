"""Shim for `transformer-translate` (see transformer/commands/cli.py): python scripts/translate.py --help"""

import sys

from transformer.commands.cli import translate_main

if __name__ == "__main__":
    sys.exit(translate_main())
