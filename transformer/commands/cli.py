"""Command-line entry points: argument parsing and wiring only; the work happens in the package.

Every command turns a `UserError` into one line on stderr and exit code 2, with no traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import sys
from collections.abc import Callable

from transformer.commands.flags import config_args, evaluate_args, model_args, translate_args
from transformer.commands.parsers import HELP, build_parser, count
from transformer.config import PRECISIONS
from transformer.errors import UserError
from transformer.fileio import is_fs_error, os_error, signals_raise


def user_errors_exit_2(main: Callable[[list[str] | None], int | None]) -> Callable[[list[str] | None], int]:
    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> int:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
        try:
            with signals_raise():  # SIGTERM unwinds like Ctrl-C: outputs being written are removed, not left torn
                return main(argv) or 0
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except BrokenPipeError:  # `transformer-translate ... | head`
            return 0
        except OSError as exc:  # a full disk, a read-only folder, a file where a folder should be: not a bug
            if not is_fs_error(exc):
                raise
            print(f"error: {os_error(exc)}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as exc:
            print(f"interrupted ({str(exc) or 'SIGINT'}); files being written were not replaced", file=sys.stderr)
            return getattr(exc, "code", 130)

    return wrapper


@user_errors_exit_2
def prepare_main(argv: list[str] | None = None) -> int:
    """transformer-prepare --config C [--set data.key=value ...]: train the vocabulary and fill the data cache."""
    args = build_parser("prepare", config_args).parse_args(argv)
    from transformer.config import load_config
    from transformer.data.coverage import unknown_report
    from transformer.data.prepare import prepare_data
    from transformer.data.tokenizer import tokenizer_from_files

    config = load_config(args.config, args.overrides)
    prepared = prepare_data(config, tokenizer=tokenizer_from_files(config.data))
    tok = prepared.tokenizer
    vocab = f"{tok.src_vocab_size} joint" if tok.joint else f"{tok.src_vocab_size} source / {tok.tgt_vocab_size} target"
    print(f"vocabulary: {vocab} SentencePiece {config.data.spm_model_type} pieces")
    for name, split in prepared.splits.items():
        dropped = "; dropped " + ", ".join(f"{n} ({why})" for why, n in split.dropped.items()) if split.dropped else ""
        print(
            f"{name}: {len(split)} pairs, {int(split.src_lengths.sum())} source and "
            f"{int(split.tgt_lengths.sum())} target tokens (incl. EOS){dropped}"
        )
        unknown = unknown_report(prepared.cache_paths[name])
        print(f"{name}: <unk> would meet {unknown}" if unknown else f"{name}: <unk> share not recorded (older cache)")
    print(f"cache: {config.data.cache_dir} ({', '.join(f'{k} {v}' for k, v in prepared.cache_paths.items())})")
    return 0


def _train_args(parser: argparse.ArgumentParser) -> None:
    """transformer-train's own flags, after --config and --set."""
    parser.add_argument("--print-config", action="store_true", help="print the resolved config (YAML) and exit")
    parser.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        metavar="CKPT",
        help="continue exactly from train.out_dir/checkpoint_last.pt, or from CKPT",
    )
    parser.add_argument("--no-progress", action="store_true", help="log lines instead of a progress bar")


@user_errors_exit_2
def train_main(argv: list[str] | None = None) -> int:
    """transformer-train --config C [--set k=v ...] [--resume [CKPT]]"""
    args = build_parser("train", config_args, _train_args).parse_args(argv)
    from transformer.config import load_config
    from transformer.training.setup import fine_tuning_config
    from transformer.training.trainer import Trainer

    config = load_config(args.config, args.overrides)
    config = config if args.resume else fine_tuning_config(args.config, args.overrides, config)
    if args.print_config:
        import yaml

        print(yaml.safe_dump(config.to_dict(), sort_keys=False), end="")
        return 0
    result = Trainer(config, resume=args.resume, progress=not args.no_progress).run()
    print(f"stopped at update {result['step']} ({result['reason']}); checkpoints in {config.train.out_dir}")
    return 0


def _average_args(parser: argparse.ArgumentParser) -> None:
    """The checkpoints to average (listed, or the last of a run directory) and the output."""
    parser.add_argument("--inputs", nargs="+", default=[], help="checkpoints to average")
    parser.add_argument("--dir", help="run directory: average its last --last numbered checkpoints")
    parser.add_argument("--last", type=count(1), default=5, help="with --dir: how many (paper: 5 base, 20 big)")
    parser.add_argument("--output", required=True, help="where to write the averaged checkpoint")
    parser.add_argument(
        "--no-calibrate",
        action="store_true",
        help="skip the average's confidence calibration on its config's validation split (transformer-calibrate)",
    )
    parser.add_argument("--device", default="auto", help="where the calibration translates: auto, cpu, cuda, cuda:N")


@user_errors_exit_2
def average_main(argv: list[str] | None = None) -> int:
    """transformer-average --inputs A.pt B.pt ... --output avg.pt  (or --last N --dir RUN)"""
    args = build_parser("average", _average_args).parse_args(argv)
    from transformer.checkpoint import average_checkpoints, numbered_checkpoints, save_checkpoint
    from transformer.fileio import check_not_an_input

    inputs = list(args.inputs)
    if args.dir:
        found = numbered_checkpoints(args.dir)
        if not found:
            raise UserError(f"no numbered checkpoints (checkpoint_<step>.pt) in {args.dir}")
        inputs += [str(p) for p in found[-args.last :]]
        if len(found) < args.last:
            logging.getLogger(__name__).warning(
                "warning: --last %d asked for %d checkpoints but %s has only %d (train.keep_last keeps that many); "
                "averaging %d",
                args.last,
                args.last,
                args.dir,
                len(found),
                len(found),
            )
    check_not_an_input(args.output, [("--inputs", p) for p in inputs])
    averaged = average_checkpoints(inputs)
    if not args.no_calibrate:  # the average's own confidence calibration (commands/calibrate.py)
        from transformer.commands.calibrate import calibrate_average

        averaged = calibrate_average(averaged, args.device)
    save_checkpoint(averaged, args.output)
    print(f"averaged {len(inputs)} checkpoints into {args.output}")
    return 0


@user_errors_exit_2
def calibrate_main(argv: list[str] | None = None) -> int:
    """transformer-calibrate --checkpoint CKPT [--config C] [--set k=v ...] [--output OUT]"""
    from transformer.commands.calibrate import calibrate_args, run_calibrate

    return run_calibrate(build_parser("calibrate", calibrate_args).parse_args(argv))


@user_errors_exit_2
def translate_main(argv: list[str] | None = None) -> int:
    """transformer-translate --checkpoint CKPT [--beam 4] [--nbest N] [--input F] [--output F] [TEXT ...]"""
    parser = build_parser("translate", translate_args)
    args = parser.parse_args(argv)
    if not args.checkpoint:
        parser.error("--checkpoint is required")
    from transformer.commands.translate import run_translate

    return run_translate(args)


@user_errors_exit_2
def evaluate_main(argv: list[str] | None = None) -> int:
    """transformer-evaluate --checkpoint CKPT [--split test | --src F --ref F | --test-set NAME --langpair xx-yy]"""
    args = build_parser("evaluate", evaluate_args).parse_args(argv)
    from transformer.commands.evaluate import run_evaluate

    return run_evaluate(args)


@user_errors_exit_2
def score_main(argv: list[str] | None = None) -> int:
    """transformer-score --checkpoint CKPT [CKPT ...] (--src F --tgt F | --split test) [--output F] [--json]"""
    from transformer.commands.score import run_score, score_args

    return run_score(build_parser("score", model_args, score_args).parse_args(argv))


def _export_args(parser: argparse.ArgumentParser) -> None:
    """The checkpoint, the format and where to write it."""
    parser.add_argument("--checkpoint", required=True, help="checkpoint file (config and SentencePiece model inside)")
    parser.add_argument("--format", required=True, choices=["hf", "ctranslate2"], help="what to write")
    parser.add_argument("--output", required=True, help="output directory (created; existing files replaced)")
    parser.add_argument("--quantization", help="ctranslate2 only: int8, int8_float32, float16, ... (default float32)")


@user_errors_exit_2
def export_main(argv: list[str] | None = None) -> int:
    """transformer-export --checkpoint CKPT --format hf|ctranslate2 --output DIR"""
    args = build_parser("export", _export_args).parse_args(argv)
    from transformer.interop.export import export_checkpoint

    output = export_checkpoint(args.checkpoint, args.format, args.output, args.quantization)
    print(f"wrote {args.format} model to {output}")
    return 0


def _import_args(parser: argparse.ArgumentParser) -> None:
    """The directory to import, its format and the checkpoint to write."""
    parser.add_argument("directory", help="a MarianMTModel.save_pretrained directory with its tokenizer files")
    parser.add_argument("--format", default="hf", choices=["hf"], help="what the directory holds")
    parser.add_argument("--output", required=True, help="the checkpoint file to write")


@user_errors_exit_2
def import_main(argv: list[str] | None = None) -> int:
    """transformer-import --format hf DIR --output CKPT"""
    args = build_parser("import", _import_args).parse_args(argv)
    from transformer.interop.hf_import import import_checkpoint

    summary = import_checkpoint(args.directory, args.output)
    print(f"wrote {args.output}: {summary}")
    return 0


@user_errors_exit_2
def distill_main(argv: list[str] | None = None) -> int:
    """transformer-distill --teacher CKPT [CKPT ...] --config STUDENT --out DIR [--stage all|translate|filter|...]"""
    from transformer.commands.distill import distill_args, run_distill

    return run_distill(build_parser("distill", distill_args).parse_args(argv))


def _serve_args(parser: argparse.ArgumentParser) -> None:
    """The models, where to listen, the keys, and ServeConfig's limits and batching (its defaults)."""
    from transformer.config import ServeConfig

    parser.add_argument(
        "--model",
        nargs="+",
        action="append",
        default=[],
        metavar="CKPT",
        help="a model for the pair its config names (repeatable: one per pair); several checkpoints: an ensemble",
    )
    parser.add_argument("--checkpoint", nargs="+", metavar="CKPT", help="one more --model (a one-pair server's flag)")
    parser.add_argument(
        "--api-keys", metavar="FILE", help="require an api_key field: FILE's keys, each with its own limits if any"
    )
    parser.add_argument(
        "--glossary",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="a glossary (TSV of terms) that requests choose with glossary: NAME (repeatable; docs/decoding.md)",
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--precision", choices=PRECISIONS, help="autocast; default: the checkpoint's decode.precision")
    parser.add_argument("--threads", type=count(0), default=0, help="torch CPU threads (0 = torch's default)")
    for name, value in dataclasses.asdict(ServeConfig()).items():
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=type(value),  # each default's type: str, int or float
            default=value,
            help=SERVE_HELP.get(name, name.replace("_", " ")),
        )


SERVE_HELP = {
    "host": "address to listen on (127.0.0.1: this machine only)",
    "port": "TCP port (0: a free one, printed at start)",
    "max_body_bytes": "largest request body (413 past it)",
    "max_lines": "most lines per request (400 past it)",
    "max_chars": "most characters per line (400 past it)",
    "batch_wait_ms": "how long a waiting request gathers others before decoding",
    "batch_tokens": "work (source tokens, control pieces) of one decoding round, shared by the requests",
    "queue_lines": "lines admitted and unanswered before requests get 503 + Retry-After",
    "retry_after_s": "the Retry-After of a 503, seconds",
    "max_beam": "largest beam_size/nbest a request may ask for",
    "max_len_a": "largest max_len_a a request may ask for",
    "max_len_b": "largest max_len_b (and min_len) a request may ask for",
    "max_output_pieces": "longest output a request's max_len_a/max_len_b may allow a line (400 past it)",
    "max_phrases": "most constraint phrases per line (400 past it)",
    "max_phrase_pieces": "most target pieces per constraint phrase (400 past it)",
    "max_constraint_pieces": "most target pieces of one line's constraints together (400 past it)",
    "max_prefix_pieces": "most target pieces of one line's prefix (400 past it)",
    "request_timeout_s": "seconds from a request's arrival to its answer (504 past it)",
    "shutdown_timeout_s": "seconds requests in flight have after SIGTERM (503 past it)",
    "max_file_bytes": "largest file POST /translate_file takes (413 past it)",
    "file_timeout_s": "seconds from a file upload's arrival to its answer (504 past it)",
    "file_store_bytes": "translated files kept for download, in all (the oldest go first past it)",
    "file_ttl_s": "seconds a translated file is kept for download (404 after)",
    "pivot": "the language a pair with no model of its own is translated through ('': none)",
    "req_limit": "requests per minute per client, its API key or its address (429 past it; -1: none)",
    "char_limit": "characters of a request's q in all; a key's own limit first (400 past it; -1: none)",
    "batch_limit": "items of a request's list q (400 past it; -1: none)",
}


@user_errors_exit_2
def serve_main(argv: list[str] | None = None) -> int:
    """transformer-serve --model CKPT [CKPT ...] [--model ...] [--host 127.0.0.1] [--port 5000] [--api-keys FILE]"""
    args = build_parser("serve", _serve_args).parse_args(argv)
    models = [*([args.checkpoint] if args.checkpoint else []), *args.model]
    if not models:
        raise UserError("transformer-serve needs a model: --model CKPT (repeatable, one per pair)")
    from transformer.config import ServeConfig

    try:
        from transformer.serving.server import serve
    except ImportError as exc:
        raise UserError(
            f"transformer-serve needs the serve extra ({exc.name} is missing): pip install "
            "'transformer[serve]' (in a checkout: pip install -e '.[serve]')"
        ) from None
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    fields = {f.name: getattr(args, f.name) for f in dataclasses.fields(ServeConfig)}
    return serve(
        models,
        ServeConfig(**fields),
        keys_file=args.api_keys,
        device=args.device,
        precision=args.precision,
        glossaries=args.glossary,
    )


@user_errors_exit_2
def keys_main(argv: list[str] | None = None) -> int:
    """transformer-keys --api-keys FILE [list | add [--key K] [--req-limit N] [--char-limit N] | remove KEY]"""
    from transformer.commands.keys import keys_args, run_keys

    print(run_keys(build_parser("keys", keys_args).parse_args(argv)))
    return 0


COMMANDS: dict[str, Callable[[list[str] | None], int]] = {
    "prepare": prepare_main,
    "train": train_main,
    "translate": translate_main,
    "evaluate": evaluate_main,
    "score": score_main,
    "average": average_main,
    "calibrate": calibrate_main,
    "export": export_main,
    "import": import_main,
    "distill": distill_main,
    "serve": serve_main,
    "keys": keys_main,
}


def main_parser() -> argparse.ArgumentParser:
    """`python -m transformer`'s parser: the commands, one line each."""
    from transformer import __version__

    width = max(map(len, COMMANDS)) + 2
    listing = "\n".join(f"  {name:<{width}}{HELP[name][0]}" for name in COMMANDS)
    parser = argparse.ArgumentParser(
        prog="python -m transformer",
        usage="%(prog)s [-h] [--version] COMMAND [options]",
        description=f"Train, run and score the paper's Transformer translator.\n\ncommands:\n{listing}",
        epilog="Each command is also installed as transformer-COMMAND; COMMAND --help shows its flags.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"transformer {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", help=argparse.SUPPRESS)
    for name in COMMANDS:
        commands.add_parser(name, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """`python -m transformer COMMAND ...`, the same as `transformer-COMMAND ...` (handy under torchrun); without a
    command, the list of commands on stderr and exit code 2."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]](argv[1:])
    parser = main_parser()
    parser.parse_args(argv)  # --help and --version exit 0 here; an unknown command exits 2
    parser.print_help(sys.stderr)
    return 2
