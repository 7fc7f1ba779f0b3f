"""Command-line entry points: argument parsing and wiring only; the work happens in the package.

Every command turns a `UserError` into one line on stderr and exit code 2, with no traceback.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from collections.abc import Callable

from transformer.errors import UserError


def _user_errors_exit_2(main: Callable[[list[str] | None], int | None]) -> Callable[[list[str] | None], int]:
    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> int:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
        try:
            return main(argv) or 0
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:  # `transformer-translate ... | head`
            return 0

    return wrapper


def _config_args(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--config", required=required, help="YAML config file (any subset of the keys)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config value, e.g. --set model.d_model=256 --set train.lr=5e-4 (repeatable)",
    )  # fmt: skip
