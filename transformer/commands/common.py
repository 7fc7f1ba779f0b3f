"""What `transformer-translate` and `transformer-evaluate` share: the settings, the checkpoint loaded into a
`StreamingEngine`, the progress bar and standard input.

Settings, lowest to highest precedence: the config stored in the checkpoint, then `--config F` (its sections
replace the checkpoint's key by key; a split such as `data.test` is replaced whole), then `--set key=value`, then
explicit flags (`--beam`, `--alpha`, ...). The `model` section always comes from the checkpoint: a config that
changes it is refused. The tokenizer (SentencePiece models) is always the checkpoint's. Several checkpoints decode
as an ensemble (decoding/ensemble.py), with the first one's config.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from transformer.config import Config, DecodeConfig, load_config
from transformer.errors import UserError
from transformer.fileio import utf8_lines

DECODE_FLAGS = (
    {"beam": "beam_size", "no_repeat_ngram_size": "no_repeat_ngram_size"}
    | {"max_ngram_repeats": "max_ngram_repeats"}
    | {
        name: name
        for name in ("nbest", "alpha", "length_penalty", "max_tokens", "min_len", "max_len_a", "max_len_b", "precision")
    }
)  # command-line flag -> DecodeConfig field
DECODE_FLAGS["constraint_beam"] = "constraint_beam_size"
DECODE_FLAGS["glossary_beam"] = "glossary_beam_size"


def resolve_config(stored: Config, args: argparse.Namespace) -> Config:
    """The checkpoint's config, then --config, then --set, then the decoding flags present in `args`."""
    config = load_config(getattr(args, "config", None), getattr(args, "overrides", []), base=stored)
    if config.model != stored.model:
        changed = [k for k, v in config.to_dict()["model"].items() if stored.to_dict()["model"][k] != v]
        raise UserError(f"the model settings come from the checkpoint; cannot change model.{', model.'.join(changed)}")
    flags = {field: getattr(args, flag, None) for flag, field in DECODE_FLAGS.items()}
    flags = {field: value for field, value in flags.items() if value is not None}
    if "beam_size" in flags and "nbest" not in flags:
        flags["nbest"] = min(config.decode.nbest, flags["beam_size"])
    return config.replace("decode", **flags) if flags else config


def describe_decode(decode: DecodeConfig) -> str:
    """One line naming every setting that changes the output."""
    search = {
        "sampling": f"sampling (temperature {decode.temperature}, top-k {decode.top_k}, top-p {decode.top_p})",
        "greedy": "greedy",
        "beam": f"beam {decode.beam_size}, length penalty {decode.length_penalty} alpha {decode.alpha}",
    }[decode.search]
    return (
        f"{search}, max length {decode.max_len_a}*S+{decode.max_len_b}, min length {decode.min_len}, "
        f"batches of {decode.max_tokens} source tokens"
    )


def load_translator(args: argparse.Namespace):
    """(translator, config, device) from --checkpoint (one, or several: an ensemble) and the settings."""
    import torch

    from transformer.decoding.confidence import read_calibration
    from transformer.decoding.ensemble import load_models
    from transformer.decoding.streaming import StreamingEngine
    from transformer.devices import pick_device
    from transformer.precision import resolve_precision

    device = pick_device(args.device)
    if args.precision:  # refused before the checkpoint is read
        resolve_precision(args.precision, device, setting="--precision")
    model, tokenizer, stored = load_models(args.checkpoint, device)
    config = resolve_config(stored, args)
    if args.threads:
        torch.set_num_threads(args.threads)
    calibration = read_calibration(args.checkpoint)  # the confidence's map (decoding/confidence.py)
    return StreamingEngine(model, tokenizer, config.decode, device=device, calibration=calibration), config, device


@contextlib.contextmanager
def progress_bar(total: int | None, quiet: bool):
    """A per-sentence progress bar on stderr (a terminal only); log lines (truncation warnings) go above it."""
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    with (
        logging_redirect_tqdm(),
        tqdm(
            total=total,
            unit="line",
            file=sys.stderr,
            dynamic_ncols=True,
            disable=quiet or not sys.stderr.isatty(),
            leave=False,
        ) as bar,
    ):
        yield bar


def stdin_lines() -> Iterator[str]:
    """Standard input as UTF-8 lines, checked like a file: the same errors, the byte-order mark dropped."""
    if sys.stdin is None or sys.stdin.closed:
        raise UserError("standard input is closed: give the text as arguments or with --input FILE")
    raw = getattr(sys.stdin, "buffer", None) or (line.encode("utf-8", "surrogateescape") for line in sys.stdin)
    return utf8_lines(raw, "standard input")
