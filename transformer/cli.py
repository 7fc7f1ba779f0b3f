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


def user_errors_exit_2(main: Callable[[list[str] | None], int | None]) -> Callable[[list[str] | None], int]:
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


@user_errors_exit_2
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


@user_errors_exit_2
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


@user_errors_exit_2
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


def _decoding_args(parser: argparse.ArgumentParser) -> None:
    """Checkpoint, config overrides, decoding flags and device: shared by translate and evaluate."""
    parser.add_argument("--checkpoint", help="checkpoint file (config and SentencePiece model inside)")
    _config_args(parser, required=False)
    parser.add_argument("--beam", type=int, help="beam size K (1 = greedy); default: the config's decode.beam_size")
    parser.add_argument("--alpha", type=float, help="length penalty exponent (paper: 0.6)")
    parser.add_argument("--length-penalty", choices=["gnmt", "fairseq", "none"], help="gnmt ((5+len)/6)^alpha: paper")
    parser.add_argument("--max-len-a", type=float, help="maximum output length = a * source length + b (paper: 1)")
    parser.add_argument("--max-len-b", type=int, help="see --max-len-a (paper: 50)")
    parser.add_argument("--min-len", type=int, help="no EOS before this many output tokens")
    parser.add_argument("--max-tokens", type=int, help="source tokens per decoding batch")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16", "auto"],
                        help="autocast dtype on CUDA (auto: bf16 where supported); CPU runs fp32")  # fmt: skip
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


@user_errors_exit_2
def translate_main(argv: list[str] | None = None) -> int:
    """transformer-translate --checkpoint CKPT [--beam 4] [--nbest N] [--input F] [--output F] [TEXT ...]"""
    parser = argparse.ArgumentParser(
        prog="transformer-translate",
        description="Translate TEXT arguments, --input FILE or stdin (streamed): one output line per input line.",
    )
    parser.add_argument("text", nargs="*", metavar="TEXT", help="sentences to translate, one per argument")
    _decoding_args(parser)
    parser.add_argument("--nbest", type=int, help="print the best N as 'index ||| text ||| score' lines")
    parser.add_argument("--input", help="input file, one sentence per line ('-' = stdin, the default)")
    parser.add_argument("--output", help="output file (default: stdout)")
    parser.add_argument("--chunk-lines", type=int, default=1000, help="lines read (and sorted) at a time from a pipe")
    args = parser.parse_args(argv)
    if not args.checkpoint:
        parser.error("--checkpoint is required")
    from transformer.inference import run_translate

    return run_translate(args)


@user_errors_exit_2
def evaluate_main(argv: list[str] | None = None) -> int:
    """transformer-evaluate --checkpoint CKPT [--split test | --src F --ref F | --test-set NAME --langpair xx-yy]"""
    parser = argparse.ArgumentParser(
        prog="transformer-evaluate",
        description="Translate a test set and print sacreBLEU BLEU and chrF with their signatures "
        "(default: the config's data.test split), or score existing output with --hyp F --ref F.",
    )
    _decoding_args(parser)
    parser.add_argument("--split", choices=["test", "valid"], default="test", help="which config split to score")
    parser.add_argument("--src", help="source file to translate (with --ref)")
    parser.add_argument("--ref", help="reference file, line-aligned")
    parser.add_argument("--test-set", help="a sacreBLEU test set, e.g. wmt14/full (downloaded; needs the internet)")
    parser.add_argument("--langpair", help="with --test-set, e.g. en-de")
    parser.add_argument("--hyp", help="score this existing output against --ref, without a model")
    parser.add_argument("--tok-bleu", action="store_true", help="also the paper's tokenized, compound-split BLEU")
    parser.add_argument("--output", help="hypotheses file (default: <checkpoint>.<test set>.hyp next to it)")
    parser.add_argument("--json", help="also write the scores and what produced them to this JSON file")
    args = parser.parse_args(argv)
    from transformer.inference import run_evaluate

    return run_evaluate(args)


@user_errors_exit_2
def export_main(argv: list[str] | None = None) -> int:
    """transformer-export --checkpoint CKPT --format hf|ctranslate2 --output DIR"""
    parser = argparse.ArgumentParser(
        prog="transformer-export",
        description="Write a checkpoint as a Hugging Face model directory (MarianMTModel for post-LN, "
        "PegasusForConditionalGeneration for pre-LN; safetensors, MarianTokenizer) or a CTranslate2 model.",
    )
    parser.add_argument("--checkpoint", required=True, help="checkpoint file (config and SentencePiece model inside)")
    parser.add_argument("--format", required=True, choices=["hf", "ctranslate2"], help="what to write")
    parser.add_argument("--output", required=True, help="output directory (created; existing files replaced)")
    parser.add_argument("--quantization", help="ctranslate2 only: int8, int8_float32, float16, ... (default float32)")
    args = parser.parse_args(argv)
    from transformer.export import export_checkpoint

    output = export_checkpoint(args.checkpoint, args.format, args.output, args.quantization)
    print(f"wrote {args.format} model to {output}")
    return 0


COMMANDS = {
    "prepare": "prepare_main",
    "train": "train_main",
    "translate": "translate_main",
    "evaluate": "evaluate_main",
    "average": "average_main",
    "export": "export_main",
}


def main(argv: list[str] | None = None) -> int:
    """`python -m transformer.cli COMMAND ...`, the same as `transformer-COMMAND ...` (handy under torchrun)."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m transformer.cli {{{','.join(COMMANDS)}}} [options]", file=sys.stderr)
        return 2
    return globals()[COMMANDS[argv[0]]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
