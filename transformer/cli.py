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


@_user_errors_exit_2
def prepare_main(argv: list[str] | None = None) -> int:
    """transformer-prepare --config C [--set data.key=value ...]: train the vocabulary and fill the data cache."""
    parser = argparse.ArgumentParser(
        prog="transformer-prepare",
        description="Train the SentencePiece vocabulary on data.train and encode every configured split into the "
        "cache (data.cache_dir); training then reuses it.",
    )
    _config_args(parser)
    args = parser.parse_args(argv)
    from transformer.config import load_config
    from transformer.data import prepare_data

    config = load_config(args.config, args.overrides)
    prepared = prepare_data(config)
    tok = prepared.tokenizer
    vocab = f"{tok.src_vocab_size} joint" if tok.joint else f"{tok.src_vocab_size} source / {tok.tgt_vocab_size} target"
    print(f"vocabulary: {vocab} SentencePiece {config.data.spm_model_type} pieces")
    for name, split in prepared.splits.items():
        dropped = "; dropped " + ", ".join(f"{n} ({why})" for why, n in split.dropped.items()) if split.dropped else ""
        print(
            f"{name}: {len(split)} pairs, {int(split.src_lengths.sum())} source and "
            f"{int(split.tgt_lengths.sum())} target tokens (incl. EOS){dropped}"
        )
    print(f"cache: {config.data.cache_dir} ({', '.join(f'{k} {v}' for k, v in prepared.cache_paths.items())})")
    return 0


@_user_errors_exit_2
def train_main(argv: list[str] | None = None) -> int:
    """transformer-train --config C [--set k=v ...] [--resume [CKPT]]"""
    parser = argparse.ArgumentParser(prog="transformer-train", description="Train a Transformer translation model.")
    _config_args(parser)
    parser.add_argument(
        "--resume", nargs="?", const=True, default=False, metavar="CKPT",
        help="continue exactly from train.out_dir/checkpoint_last.pt, or from CKPT",
    )  # fmt: skip
    parser.add_argument("--no-progress", action="store_true", help="log lines instead of a progress bar")
    args = parser.parse_args(argv)
    from transformer.config import load_config
    from transformer.trainer import Trainer

    config = load_config(args.config, args.overrides)
    result = Trainer(config, resume=args.resume, progress=not args.no_progress).run()
    print(f"stopped at update {result['step']} ({result['reason']}); checkpoints in {config.train.out_dir}")
    return 0


@_user_errors_exit_2
def average_main(argv: list[str] | None = None) -> int:
    """transformer-average --inputs A.pt B.pt ... --output avg.pt  (or --last N --dir RUN)"""
    parser = argparse.ArgumentParser(prog="transformer-average", description="Average checkpoint weights.")
    parser.add_argument("--inputs", nargs="+", default=[], help="checkpoints to average")
    parser.add_argument("--dir", help="run directory: average its last --last numbered checkpoints")
    parser.add_argument("--last", type=int, default=5, help="with --dir: how many (paper: 5 base, 20 big)")
    parser.add_argument("--output", required=True, help="where to write the averaged checkpoint")
    args = parser.parse_args(argv)
    from pathlib import Path

    from transformer.checkpoint import average_checkpoints, save_checkpoint

    inputs = list(args.inputs)
    if args.dir:
        found = sorted(Path(args.dir).glob("checkpoint_[0-9]*.pt"), key=lambda p: int(p.stem.split("_")[1]))
        if not found:
            raise UserError(f"no numbered checkpoints (checkpoint_<step>.pt) in {args.dir}")
        inputs += [str(p) for p in found[-args.last :]]
    save_checkpoint(average_checkpoints(inputs), args.output)
    print(f"averaged {len(inputs)} checkpoints into {args.output}")
    return 0
