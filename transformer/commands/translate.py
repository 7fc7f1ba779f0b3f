"""The work of `transformer-translate` (cli.py parses its arguments; common.py loads the checkpoint).

Input lines from TEXT arguments, `--input FILE` (`-` = stdin) or stdin, streamed (a terminal gets each line's
translation as it is entered, a pipe in chunks of `--chunk-lines`); exactly one output line per input line, or
with `--nbest N` up to N lines `index ||| text ||| score` per input line (index counts input lines from 0; an empty
input line gives one line with empty text and score 0). `--alignment` appends the word alignment in Pharaoh format
(`0-0 1-2 ...`, decoding/alignment.py) after a tab (`text<TAB>alignment`; a translation holds no tab, SentencePiece
turns tabs into spaces), or after ` ||| ` on --nbest lines; an empty input line gives an empty alignment.
`--prefix-file F` (one target prefix per input line) and `--constraints-file F` (one JSON list of phrases per input
line) are read beside the input, lazily; `--glossary F` (decoding/glossary.py) is read whole before the
checkpoint, and the target terms of the terms each line holds join that line's constraints; `--replace-unk` copies
source text over each `<unk>` (docs/decoding.md).
`--confidence` appends each translation's confidence in [0, 1] (decoding/confidence.py) after a tab, before the
alignment (`text<TAB>confidence<TAB>alignment`), or after the score on --nbest lines (`index ||| text ||| score |||
confidence`). `--min-confidence X` marks each translation whose confidence is below X (`auto`: the checkpoint's
threshold) with `LOW_MARK` before its text, or with `--low-confidence empty` prints it as an empty line: the
output has as many lines as without it. Without a calibration in the checkpoint (or with several checkpoints) the
confidence is the uncalibrated fallback, with a warning, and `--min-confidence auto` is refused.
`--attention-maps DIR` also draws the attention maps of the best translation of each of the first `MAX_MAP_LINES`
lines (decoding/attention_maps.py) into DIR/line{index}_{encoder,decoder,cross}_layer{N}.png.
Protected spans (placeholders, URLs, e-mail addresses, paths, options, numbers, code; `--protect REGEX` adds
patterns, `--no-protect-numbers` lets the model translate numbers, `--no-protect` none) are masked from the model
and placed back by word alignment, each exactly once (documents/protection.py; api.translate_protected).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from transformer.api import translate_protected
from transformer.commands.common import load_translator, progress_bar, stdin_lines
from transformer.commands.documents import guess_mode
from transformer.commands.flags import protection
from transformer.decoding.alignment import pharaoh
from transformer.decoding.attention_maps import require_matplotlib, write_maps
from transformer.decoding.confidence import UNCALIBRATED
from transformer.decoding.glossary import Glossary
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


MAX_MAP_LINES = 20  # --attention-maps draws this many lines' maps at most (a dozen PNG files each)


def _recorded(lines: Iterator[str], record: list[str]) -> Iterator[str]:
    """`lines`, the first `MAX_MAP_LINES` of them also appended to `record` as they are read."""
    for line in lines:
        if len(record) < MAX_MAP_LINES:
            record.append(line)
        yield line


def _draw_maps(translator, folder: str, index: int, read: list[str], translation) -> None:
    if index < MAX_MAP_LINES:
        write_maps(translator.model, translator.tokenizer, read[index], translation.tokens, folder, f"line{index}")
    elif index == MAX_MAP_LINES:
        logging.getLogger(__name__).warning("--attention-maps: drawn for the first %d lines only", MAX_MAP_LINES)


def _links(translation, separator: str) -> str:
    """The separator and the Pharaoh alignment, when one was asked for; else nothing."""
    return "" if translation.alignment is None else separator + pharaoh(translation.alignment)


LOW_MARK = "[?] "  # --min-confidence's mark before a translation below the threshold (--low-confidence mark)


@dataclass(frozen=True)
class _Shown:
    """How each translation is printed: its confidence column, and the threshold below which it is marked or
    left out (None: none)."""

    confidence: bool = False
    threshold: float | None = None
    empty: bool = False  # below the threshold: an empty text instead of a marked one

    def text(self, translation) -> str:
        if self.threshold is None or translation.confidence >= self.threshold:
            return translation.text
        return "" if self.empty else LOW_MARK + translation.text

    def column(self, translation, separator: str) -> str:
        return f"{separator}{translation.confidence:.4f}" if self.confidence else ""


def _shown(args: argparse.Namespace, translator) -> _Shown:
    """--confidence, --min-confidence and --low-confidence against the translator's calibration: --min-confidence
    auto needs one; without one the confidences are uncalibrated, said once on stderr."""
    asked = args.confidence or args.min_confidence is not None
    calibration = translator.calibration
    if asked and calibration is None:
        which = "several checkpoints (an ensemble) have" if len(args.checkpoint) > 1 else f"{args.checkpoint[0]} has"
        if args.min_confidence == "auto":
            raise UserError(
                f"--min-confidence auto uses the checkpoint's threshold, but {which} no confidence calibration: give "
                "a number (--min-confidence 0.2) or run transformer-calibrate --checkpoint CKPT"
            )
        logging.getLogger(__name__).warning(
            "warning: %s no confidence calibration: the confidences are %s (transformer-calibrate --checkpoint CKPT "
            "calibrates one)",
            which,
            UNCALIBRATED,
        )
    threshold = calibration.threshold if args.min_confidence == "auto" else args.min_confidence
    return _Shown(args.confidence, threshold, args.low_confidence == "empty")


def _write(out, index: int, results: list, nbest: bool, shown: _Shown) -> None:
    """One input line's output: its translation (text, confidence, alignment), or with --nbest its lines."""
    if nbest:
        out.writelines(
            f"{index} ||| {shown.text(r)} ||| {r.score:.4f}{shown.column(r, ' ||| ')}{_links(r, ' ||| ')}\n"
            for r in results
        )
    else:
        best = results[0]
        out.write(shown.text(best) + shown.column(best, "\t") + _links(best, "\t") + "\n")


def _constraint_lists(path: str) -> Iterator[list]:
    """--constraints-file: one JSON list of phrases per line, read lazily; a bad line is a `UserError` naming it."""
    for number, line in enumerate(_stream_lines(path), start=1):
        try:
            phrases = json.loads(line) if line.strip() else []
        except json.JSONDecodeError as exc:
            raise UserError(
                f'{path} line {number}: not JSON ({exc.msg}); write a list of phrases, e.g. ["the house"]'
            ) from None
        except RecursionError:  # brackets nested past Python's recursion limit
            raise UserError(
                f'{path} line {number}: JSON nested too deep to read; write a list of phrases, e.g. ["the house"]'
            ) from None
        if not isinstance(phrases, list):
            raise UserError(f'{path} line {number}: not a JSON list of phrases; write e.g. ["the house"] or []')
        yield phrases


def _steering(args: argparse.Namespace, glossary: Glossary | None) -> dict:
    """StreamingEngine.translate's prefix, constraints, replace_unk and glossary from --prefix-file, --constraints-file
    and --replace-unk (the files read lazily, beside the input), and the loaded --glossary."""
    for flag, path in (("--prefix-file", args.prefix_file), ("--constraints-file", args.constraints_file)):
        if path and not Path(path).is_file():
            raise UserError(f"{flag}: file not found: {path}")
    prefix = _stream_lines(args.prefix_file) if args.prefix_file else None
    constraints = _constraint_lists(args.constraints_file) if args.constraints_file else None
    return dict(prefix=prefix, constraints=constraints, replace_unk=args.replace_unk, glossary=glossary)


def split_checkpoints(args: argparse.Namespace) -> None:
    """`--checkpoint a.pt b.pt "Hola."`: argparse gives --checkpoint every value; from the first value after the
    first that neither ends in .pt nor names a file, the values are TEXT."""
    paths = args.checkpoint
    cut = next((i for i, v in enumerate(paths) if i and not (v.endswith(".pt") or Path(v).is_file())), len(paths))
    if cut < len(paths) and args.text:
        raise UserError("give the TEXT arguments in one place: all after the checkpoints, or all before --checkpoint")
    args.checkpoint, args.text = paths[:cut], args.text or paths[cut:]


def _check_files(args: argparse.Namespace) -> None:
    """The input file exists, and --output names none of the files read."""
    if args.input and args.input != "-" and not Path(args.input).is_file():
        raise UserError(f"input file not found: {args.input}")
    inputs = [
        ("--input", args.input),
        *(("--checkpoint", c) for c in args.checkpoint),
        ("--config", args.config),
        ("--prefix-file", args.prefix_file),
        ("--constraints-file", args.constraints_file),
        ("--glossary", args.glossary),
    ]
    check_not_an_input(args.output, inputs)


def run_translate(args: argparse.Namespace) -> int:
    split_checkpoints(args)
    _check_files(args)
    glossary = Glossary.load(args.glossary) if args.glossary else None  # a bad file: one line, before the checkpoint
    if args.format and (args.confidence or args.min_confidence is not None):
        raise UserError("--confidence and --min-confidence work line by line; --format translates a whole document")
    args.format, mode = guess_mode(args)  # without --format, a document's extension chooses (commands/documents.py)
    if args.format:  # a whole document, markup kept
        from transformer.commands.documents import translate_file

        return translate_file(args, glossary, mode)
    if args.alignment_layer is not None and not args.alignment:
        raise UserError("--alignment-layer chooses the layer for --alignment: add --alignment")
    if (args.alignment or args.attention_maps) and len(args.checkpoint) > 1:
        raise UserError("--alignment and --attention-maps read one model's attention: give one --checkpoint")
    if args.attention_maps:
        require_matplotlib()
    protect = protection(args)  # a bad --protect pattern: one line, before the checkpoint is read
    translator, config, _ = load_translator(args)
    shown = _shown(args, translator)
    lines, total, interactive = _input_lines(args)
    read: list[str] = []  # the lines whose attention maps are drawn
    lines = _recorded(lines, read) if args.attention_maps else lines
    chunk = 1 if interactive else args.chunk_lines
    done = 0
    to_file = args.output is not None and args.output != "-"
    try:  # the output file appears (atomically) only once every line is translated
        output = atomic_output(args.output) if to_file else contextlib.nullcontext(sys.stdout)
        with output as out, progress_bar(total, args.quiet or interactive) as bar:
            translations = translate_protected(
                translator,
                lines,
                protect,
                chunk_lines=chunk,
                progress=bar.update,
                alignment=args.alignment,
                alignment_layer=args.alignment_layer,
                **_steering(args, glossary),
            )
            for index, results in enumerate(translations):
                if index == 0 and mode:  # the mode said once the first line is translated, above the bar
                    bar.write(mode, file=sys.stderr)
                _write(out, index, results, config.decode.nbest > 1, shown)  # resolve_config merged --nbest, --beam
                if args.attention_maps:
                    _draw_maps(translator, args.attention_maps, index, read, results[0])
                out.flush()
                done += 1
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM through `fileio.signals_raise`
        where = f"{args.output} was not written (it keeps its previous contents)" if to_file else "on stdout"
        print(f"interrupted ({str(exc) or 'SIGINT'}) after {done} translated lines: {where}", file=sys.stderr)
        return getattr(exc, "code", 130)
    return 0
