"""The work of `transformer-calibrate` (cli.py wires it; its own flags are here) and of transformer-average's
calibration: a checkpoint's confidence calibration (training/calibration.py, decoding/confidence.py) fitted on the
validation split of its config, translated with its decoding settings, and written into the checkpoint.

`--config F` and `--set key=value` change the split and the decoding settings as they do for transformer-evaluate
(commands/common.py; the model section stays the checkpoint's); the stored config itself is left as it is. The
checkpoint is replaced atomically, or `--output F` gets a calibrated copy. transformer-average calibrates the
average on the first checkpoint's config (its train.confidence_lines pairs; 0: none) unless `--no-calibrate`; a
config whose validation split cannot be read leaves the average uncalibrated, with a warning that names the
command to run.
"""

from __future__ import annotations

import argparse
import logging

from transformer.commands.flags import config_args
from transformer.commands.parsers import count
from transformer.errors import UserError

log = logging.getLogger(__name__)


def calibrate_args(parser: argparse.ArgumentParser) -> None:
    """transformer-calibrate's flags."""
    parser.add_argument("--checkpoint", required=True, metavar="CKPT", help="the checkpoint to calibrate")
    config_args(parser, required=False)
    parser.add_argument("--output", help="write the calibrated checkpoint here (default: replace CKPT, atomically)")
    parser.add_argument("--lines", type=count(1), default=1000, help="validation pairs to fit the calibration on")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    parser.add_argument("--threads", type=count(0), default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run_calibrate(args: argparse.Namespace) -> int:
    from transformer.checkpoint import load_checkpoint, save_checkpoint
    from transformer.commands.common import resolve_config
    from transformer.config import from_dict
    from transformer.data.corpus import input_files
    from transformer.fileio import check_not_an_input

    state = load_checkpoint(args.checkpoint)
    config = resolve_config(from_dict(state["config"]), args)
    output = args.output or args.checkpoint
    if args.output:
        valid = [("data.valid", p) for p in input_files(config.data.valid)] if config.data.valid else []
        check_not_an_input(args.output, [("--checkpoint", args.checkpoint), ("--config", args.config), *valid])
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    calibrated = _calibrated(state, config, lines=args.lines, device=args.device, quiet=args.quiet)
    save_checkpoint(calibrated, output)
    confidence = calibrated["confidence"]
    print(f"calibrated {output}: default threshold {confidence['threshold']:.4f}; {confidence['about']}")
    return 0


def calibrate_average(state: dict, device: str = "auto") -> dict:
    """transformer-average's: the average calibrated on its (first checkpoint's) config, on its first
    train.confidence_lines validation pairs (0: not calibrated, as the run's own checkpoints), or left as it is
    with a warning when that config's validation split cannot be read."""
    from transformer.config import from_dict

    config = from_dict(state["config"])
    if not config.train.confidence_lines:
        log.info("the average is not calibrated: its config's train.confidence_lines is 0 (transformer-calibrate)")
        return state
    try:
        return _calibrated(state, config, lines=config.train.confidence_lines, device=device, quiet=True)
    except UserError as exc:
        log.warning(
            "warning: the average has no confidence calibration (%s); transformer-calibrate --checkpoint OUT "
            "--config CONFIG calibrates it",
            exc,
        )
        return state


def _calibrated(state: dict, config, *, lines: int, device: str, quiet: bool) -> dict:
    from transformer.commands.common import progress_bar
    from transformer.devices import pick_device
    from transformer.training.calibration import calibrate_state

    with progress_bar(None, quiet) as bar:
        return calibrate_state(state, config, lines=lines, device=pick_device(device), progress=bar.update)
