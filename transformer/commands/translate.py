"""The work of `transformer-translate` (cli.py parses its arguments; common.py loads the checkpoint).

Input lines from TEXT arguments, `--input FILE` (`-` = stdin) or stdin, streamed (a terminal gets each line's
translation as it is entered, a pipe in chunks of `--chunk-lines`); exactly one output line per input line, or
with `--nbest N` up to N lines `index ||| text ||| score` per input line (index counts input lines from 0; an empty
input line gives one line with empty text and score 0).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from transformer.commands.common import load_translator, progress_bar, stdin_lines
from transformer.errors import UserError
from transformer.fileio import atomic_output, check_not_an_input, utf8_lines


def _prompted_stdin() -> Iterator[str]:
    """Lines typed at a terminal, each after a prompt on stderr; Ctrl-D ends."""
    print("type a sentence and press Enter (Ctrl-D to quit)", file=sys.stderr)
    while True:
        print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line:
            print(file=sys.stderr)
            return
        yield line.rstrip("\r\n")


def _stream_lines(path: str) -> Iterator[str]:
    """Lines of a UTF-8 file read lazily, newline removed; a bad file is a `UserError` naming the line."""
    if not Path(path).is_file():
        raise UserError(f"input file not found: {path}")
    with open(path, "rb") as f:
        yield from utf8_lines(f, path)


def _input_lines(args: argparse.Namespace) -> tuple[Iterator[str], int | None, bool]:
    """(lines, total if known, interactive) from TEXT arguments, --input or stdin."""
    if args.text and args.input:
        raise UserError("give the text either as arguments or with --input, not both")
    if args.text:
        return iter(args.text), len(args.text), False
    if args.input and args.input != "-":
        lines = _stream_lines(args.input)  # checks the file now, not at the first read
        with open(args.input, "rb") as f:
            total = sum(1 for _ in f)
        return lines, total, False
    if sys.stdin is not None and not sys.stdin.closed and sys.stdin.isatty():
        return _prompted_stdin(), None, True
    return stdin_lines(), None, False


def split_checkpoints(args: argparse.Namespace) -> None:
    """`--checkpoint a.pt b.pt "Hola."`: argparse gives --checkpoint every value; from the first value after the
    first that neither ends in .pt nor names a file, the values are TEXT."""
    paths = args.checkpoint
    cut = next((i for i, v in enumerate(paths) if i and not (v.endswith(".pt") or Path(v).is_file())), len(paths))
    if cut < len(paths) and args.text:
        raise UserError("give the TEXT arguments in one place: all after the checkpoints, or all before --checkpoint")
    args.checkpoint, args.text = paths[:cut], args.text or paths[cut:]


def run_translate(args: argparse.Namespace) -> int:
    split_checkpoints(args)
    if args.input and args.input != "-" and not Path(args.input).is_file():
        raise UserError(f"input file not found: {args.input}")
    inputs = [("--input", args.input), *(("--checkpoint", c) for c in args.checkpoint), ("--config", args.config)]
    check_not_an_input(args.output, inputs)
    translator, config, _ = load_translator(args)
    lines, total, interactive = _input_lines(args)
    chunk = 1 if interactive else args.chunk_lines
    done = 0
    to_file = args.output is not None and args.output != "-"
    try:  # the output file appears (atomically) only once every line is translated
        output = atomic_output(args.output) if to_file else contextlib.nullcontext(sys.stdout)
        with output as out, progress_bar(total, args.quiet or interactive) as bar:
            for index, results in enumerate(translator.translate(lines, chunk_lines=chunk, progress=bar.update)):
                if config.decode.nbest > 1:  # resolve_config merged --nbest and --beam into it
                    out.writelines(f"{index} ||| {r.text} ||| {r.score:.4f}\n" for r in results)
                else:
                    out.write(results[0].text + "\n")
                out.flush()
                done += 1
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM through `fileio.signals_raise`
        where = f"{args.output} was not written (it keeps its previous contents)" if to_file else "on stdout"
        print(f"interrupted ({str(exc) or 'SIGINT'}) after {done} translated lines: {where}", file=sys.stderr)
        return getattr(exc, "code", 130)
    return 0
