"""`python -m transformer COMMAND ...`, the same as `transformer-COMMAND ...`."""

import sys

from transformer.commands.cli import main

sys.exit(main())
