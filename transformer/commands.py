"""The work of `transformer-translate` and `transformer-evaluate`, the commands that run a trained checkpoint
(cli.py parses their arguments; the other commands' work is in data.py, trainer.py, checkpoint.py and export.py).

Settings, lowest to highest precedence: the config stored in the checkpoint, then `--config F` (its sections
replace the checkpoint's key by key; a split such as `data.test` is replaced whole), then `--set key=value`, then
explicit flags (`--beam`, `--alpha`, ...). The `model` section always comes from the checkpoint: a config that
changes it is refused. The tokenizer (SentencePiece models) is always the checkpoint's.

translate: input lines from TEXT arguments, `--input FILE` (`-` = stdin) or stdin, streamed (a terminal gets each
line's translation as it is entered, a pipe in chunks of `--chunk-lines`); exactly one output line per input line,
or with `--nbest N` up to N lines `index ||| text ||| score` per input line (index counts input lines from 0; an
empty input line gives one line with empty text and score 0).

evaluate: translates a test set (the config's `data.test`, or `--split valid`, or `--src F --ref F`, or a sacreBLEU
test set with `--test-set NAME --langpair xx-yy`), writes the hypotheses (default: next to the checkpoint,
`<checkpoint without .pt>.<test set>.hyp`), and prints which checkpoint, test set and decoding settings produced
the scores; `--json F` writes the same as JSON. `--hyp F --ref F` scores existing output without a model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transformer.config import Config, DecodeConfig, SplitConfig, load_config
from transformer.errors import UserError
from transformer.fileio import atomic_output, check_not_an_input, utf8_lines, write_text

DECODE_FLAGS = {"beam": "beam_size"} | {
    name: name
    for name in ("nbest", "alpha", "length_penalty", "max_tokens", "min_len", "max_len_a", "max_len_b", "precision")
}  # command-line flag -> DecodeConfig field


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


def _load(args: argparse.Namespace):
    """(translator, config, device) from --checkpoint and the settings."""
    import torch

    from transformer.checkpoint import build_model, load_checkpoint
    from transformer.precision import resolve_precision
    from transformer.translator import Translator, pick_device

    device = pick_device(args.device)
    if args.precision:  # refused before the checkpoint is read
        resolve_precision(args.precision, device, setting="--precision")
    state = load_checkpoint(args.checkpoint)
    model, tokenizer, stored = build_model(state, device)
    config = resolve_config(stored, args)
    if args.threads:
        torch.set_num_threads(args.threads)
    return Translator(model, tokenizer, config.decode, device=device), config, device


@contextlib.contextmanager
def _progress(total: int | None, quiet: bool):
    """A per-sentence progress bar on stderr (a terminal only); log lines (truncation warnings) go above it."""
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    with logging_redirect_tqdm(), tqdm(total=total, unit="line", file=sys.stderr, dynamic_ncols=True,
                                       disable=quiet or not sys.stderr.isatty(), leave=False) as bar:  # fmt: skip
        yield bar


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


# ------------------------------------------------------------------------------------------------- translate


def _stream_lines(path: str) -> Iterator[str]:
    """Lines of a UTF-8 file read lazily, newline removed; a bad file is a `UserError` naming the line."""
    if not Path(path).is_file():
        raise UserError(f"input file not found: {path}")
    with open(path, "rb") as f:
        yield from utf8_lines(f, path)


def _stdin_lines() -> Iterator[str]:
    """Standard input as UTF-8 lines, checked like a file: the same errors, the byte-order mark dropped."""
    if sys.stdin is None or sys.stdin.closed:
        raise UserError("standard input is closed: give the text as arguments or with --input FILE")
    raw = getattr(sys.stdin, "buffer", None) or (line.encode("utf-8", "surrogateescape") for line in sys.stdin)
    return utf8_lines(raw, "standard input")


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
    return _stdin_lines(), None, False


def run_translate(args: argparse.Namespace) -> int:
    if args.input and args.input != "-" and not Path(args.input).is_file():
        raise UserError(f"input file not found: {args.input}")
    inputs = [("--input", args.input), ("--checkpoint", args.checkpoint), ("--config", args.config)]
    check_not_an_input(args.output, inputs)
    translator, config, _ = _load(args)
    lines, total, interactive = _input_lines(args)
    chunk = 1 if interactive else args.chunk_lines
    done = 0
    to_file = args.output is not None and args.output != "-"
    try:  # the output file appears (atomically) only once every line is translated
        output = atomic_output(args.output) if to_file else contextlib.nullcontext(sys.stdout)
        with output as out, _progress(total, args.quiet or interactive) as bar:
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


# -------------------------------------------------------------------------------------------------- evaluate


def _describe_split(name: str, split: SplitConfig) -> str:
    from transformer.corpus import describe_split

    where = describe_split(split)
    return f"config data.{name}: {where}" + (f", first {split.max_examples}" if split.max_examples else "")


def _test_set(args: argparse.Namespace, config: Config) -> tuple[list[str], list[str], str, str]:
    """(sources, references, description, short name for the hypothesis file)."""
    from transformer.corpus import load_pairs
    from transformer.evaluation import sacrebleu_test_set

    if args.test_set:
        if not args.langpair:
            raise UserError("--test-set needs --langpair, e.g. --test-set wmt14/full --langpair en-de")
        sources, references = sacrebleu_test_set(args.test_set, args.langpair)
        name = f"{args.test_set.replace('/', '-')}.{args.langpair}"
        return sources, references, f"sacreBLEU {args.test_set} {args.langpair}", name
    if args.src or args.ref:
        if not (args.src and args.ref):
            raise UserError("--src and --ref go together (or use --hyp F --ref F to score existing output)")
        sources, references = _read_text(args.src), _read_text(args.ref[0])
        if len(sources) != len(references):
            raise UserError(f"{args.src} has {len(sources)} lines but {args.ref[0]} has {len(references)}")
        return sources, references, f"{args.src} -> {' '.join(args.ref)}", Path(args.src).name
    split = getattr(config.data, args.split)
    if split is None:
        raise UserError(f"the config has no data.{args.split} split: pass --src F --ref F or --test-set NAME")
    sources, references = load_pairs(split, config.data)
    return sources, references, _describe_split(args.split, split), args.split


def _read_text(path: str) -> list[str]:
    """Lines of a file, or of standard input for `-`."""
    from transformer.corpus import read_lines

    if path == "-":
        return [line.strip() for line in _stdin_lines()]
    return read_lines(path)


def _scores(systems: dict[str, list[str]], references: list[list[str]], args: argparse.Namespace, lang=None):
    """sacreBLEU's scores of every system (evaluation.score_systems) as a record, plus the first system's under
    the flat keys (bleu, bleu_signature, chrf, ter, ...) and the paper-style BLEU on request."""
    from transformer.evaluation import TOK_BLEU_LABEL, score_systems, tokenized_bleu

    paired = "bs" if args.paired_bs else "ar" if args.paired_ar else None
    record = score_systems(
        systems, references, metrics=args.metrics, tokenize=args.tokenize, lowercase=args.lowercase,
        chrf_word_order=args.chrf_word_order, paired=paired, paired_n=args.paired_n,
    )  # fmt: skip
    for name, score in record["systems"][0]["scores"].items():
        key = "chrf" if name.startswith("chrF") else name.lower()
        record |= {key: score["score"], f"{key}_signature": score["signature"], f"{key}_detail": score["detail"]}
    if args.tok_bleu:
        first = next(iter(systems.values()))
        record["tok_bleu"], record["tok_bleu_detail"] = tokenized_bleu(first, references[0], lang)
        record["tok_bleu_label"] = TOK_BLEU_LABEL
    return record


def _report(lines: dict[str, Any], scores: dict[str, Any], json_path: str | None, *, to_stderr=False, **extra) -> None:
    """Print what was scored and the scores; `json_path` gets the same (and `extra`) as JSON (`-`: standard
    output, and the human-readable lines go to standard error)."""
    from transformer.evaluation import format_systems

    width = max(len(k) for k in lines) + 1
    text = "\n".join(f"{key + ':':<{width}} {value}" for key, value in lines.items() if value is not None)
    text += "\n" + format_systems(scores)
    if "tok_bleu" in scores:
        text += f"\n{scores['tok_bleu_label']}: {scores['tok_bleu']:.2f}\n        {scores['tok_bleu_detail']}"
    print(text, file=sys.stderr if to_stderr or json_path == "-" else sys.stdout)
    if json_path:
        record = {k.replace(" ", "_"): v for k, v in lines.items()} | extra | scores
        dump = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
        if json_path == "-":
            sys.stdout.write(dump)
        else:
            write_text(json_path, dump)


def _score_files(args: argparse.Namespace) -> int:
    if args.checkpoint or args.src or args.test_set:
        raise UserError("--hyp scores existing output against --ref; it takes no --checkpoint, --src or --test-set")
    if not args.ref:
        raise UserError("--hyp needs --ref, the reference file(s) to score it against")
    if [*args.hyp, *args.ref].count("-") > 1:
        raise UserError("only one of --hyp and --ref can be '-' (standard input)")
    check_not_an_input(args.json, [*(("--hyp", h) for h in args.hyp), *(("--ref", r) for r in args.ref)])
    references = [_read_text(ref) for ref in args.ref]
    systems = {}
    for hyp in args.hyp:
        if hyp in systems:
            raise UserError(f"{hyp} is given twice to --hyp; each system once")
        systems[hyp] = _read_text(hyp)
    scores = _scores(systems, references, args)
    _report({"hypotheses": " ".join(args.hyp), "references": " ".join(args.ref)}, scores, args.json)
    return 0


def _check_outputs(args: argparse.Namespace, config: Config, output: Path) -> None:
    """Neither the hypotheses file nor --json may be an input: the checkpoint, a config or a test-set file."""
    inputs = [("--checkpoint", args.checkpoint), ("--config", args.config), ("--src", args.src)]
    inputs += [("--ref", ref) for ref in args.ref or []]
    split = getattr(config.data, args.split) if not (args.src or args.test_set) else None
    if split:
        from transformer.corpus import input_files

        inputs += [(f"data.{args.split}", p) for p in input_files(split)]
    check_not_an_input(output, inputs)
    check_not_an_input(args.json, [*inputs, ("the hypotheses file", output)])


def run_evaluate(args: argparse.Namespace) -> int:
    if args.hyp:
        return _score_files(args)
    if not args.checkpoint:
        raise UserError("give --checkpoint CKPT to translate a test set, or --hyp F --ref F to score a file")
    if not Path(args.checkpoint).is_file():
        raise UserError(f"checkpoint not found: {args.checkpoint}")
    translator, config, device = _load(args)
    sources, references, description, name = _test_set(args, config)
    checkpoint = Path(args.checkpoint)
    output = Path(args.output) if args.output else checkpoint.parent / f"{checkpoint.stem}.{name}.hyp"
    _check_outputs(args, config, output)
    with _progress(len(sources), args.quiet) as bar:
        hypotheses = [results[0].text for results in translator.translate(sources, progress=bar.update)]
    if args.output == "-":
        sys.stdout.writelines(h + "\n" for h in hypotheses)
        sys.stdout.flush()
    else:
        with atomic_output(output) as f:
            f.writelines(h + "\n" for h in hypotheses)
    extra_refs = [_read_text(ref) for ref in args.ref[1:]] if args.ref else []
    scores = _scores({str(output): hypotheses}, [references, *extra_refs], args, lang=config.data.tgt_lang)
    lines = {"checkpoint": args.checkpoint, "test set": f"{description}, {len(sources)} sentences",
             "decoding": describe_decode(config.decode), "device": f"{device} {translator.precision}",
             "hypotheses": "standard output" if args.output == "-" else str(output)}  # fmt: skip
    _report(lines, scores, args.json, to_stderr=args.output == "-", decode=config.to_dict()["decode"])
    return 0
