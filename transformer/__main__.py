"""`python -m transformer COMMAND ...`, the same as `transformer-COMMAND ...` and `python -m transformer.cli`."""

import sys

from transformer.cli import main

sys.exit(main())
