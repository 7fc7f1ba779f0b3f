"""Train the SentencePiece vocabulary and encode the data cache: same as `transformer-prepare`."""

import sys

from transformer.commands.cli import prepare_main

if __name__ == "__main__":
    sys.exit(prepare_main())
