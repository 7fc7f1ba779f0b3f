"""The work of `transformer-score` (cli.py wires it, its own flags are here; common.py loads the checkpoints): the
model's log-probability of given translations (decoding/scoring.py).

Pairs from `--src F --tgt F` (line-aligned; one of them may be `-`, standard input) or a config split (`--split`,
default test). One TSV line per pair, in input order, `log_prob per_token ppl tokens` (tab-separated: the sum of
the target's token log-probabilities, EOS included; that over its token count; exp(-per_token); the count), to
standard output or `--output F`; an empty source gives `0.0000 nan nan 0` (not scored, left out of the totals).
`--json` writes one JSON document instead: what was scored, a record per pair (NaN and infinities as null) and
the totals. The summary (pairs, tokens, the token-weighted mean NLL and its perplexity) goes to standard error
when the scores go to standard output, else to standard output.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from transformer.errors import UserError


def score_args(parser: argparse.ArgumentParser) -> None:
    """transformer-score's own flags, after the model flags (flags.py's `model_args`)."""
    parser.add_argument("--src", help="source sentences, one per line ('-' = standard input)")
    parser.add_argument("--tgt", help="their translations to score, line-aligned with --src ('-' = standard input)")
    parser.add_argument(
        "--split", choices=["test", "valid"], default="test", help="without --src/--tgt: the config split to score"
    )
    parser.add_argument("--output", help="where to write the scores ('-' or none: standard output)")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of TSV lines")


def _read(path: str) -> list[str]:
    """Lines of a file, or of standard input for `-`, stripped."""
    from transformer.commands.common import stdin_lines
    from transformer.data.corpus import read_lines

    return [line.strip() for line in stdin_lines()] if path == "-" else read_lines(path)


def _pairs(args: argparse.Namespace, config) -> tuple[list[str], list[str], str, list[tuple[str, str]]]:
    """(sources, targets, what they are, (flag, file) read) from --src/--tgt or the config split; refuses empty or
    misaligned files."""
    if args.src or args.tgt:
        if not (args.src and args.tgt):
            raise UserError("--src and --tgt go together: the sources and the translations to score")
        if args.src == args.tgt == "-":
            raise UserError("only one of --src and --tgt can be '-' (standard input)")
        sources, targets = _read(args.src), _read(args.tgt)
        for path, lines in ((args.src, sources), (args.tgt, targets)):
            if not lines:
                raise UserError(f"{'standard input' if path == '-' else path} is empty: nothing to score")
        if len(sources) != len(targets):
            raise UserError(
                f"{args.src} has {len(sources)} lines but {args.tgt} has {len(targets)}: the pairs must be line-aligned"
            )
        return sources, targets, f"{args.src} -> {args.tgt}", [("--src", args.src), ("--tgt", args.tgt)]
    from transformer.data.corpus import describe_split, input_files, load_pairs

    split = getattr(config.data, args.split)
    if split is None:
        raise UserError(f"the config has no data.{args.split} split: pass --src F --tgt F")
    sources, targets = load_pairs(split, config.data)
    files = [(f"data.{args.split}", path) for path in input_files(split)]
    return sources, targets, f"config data.{args.split}: {describe_split(split)}", files


def _finite(x: float) -> float | None:
    """JSON has no NaN or infinity: null (a pair not scored, or a perplexity beyond a float)."""
    return x if math.isfinite(x) else None


def format_scores(scores, total: dict[str, Any], as_json: bool, about: dict[str, Any]) -> str:
    """The scores as TSV lines (one per pair) or as one JSON document (`about`, a record per pair, the totals)."""
    if not as_json:
        return "".join(f"{s.log_prob:.4f}\t{s.per_token:.4f}\t{s.ppl:.4f}\t{s.tokens}\n" for s in scores)
    pairs = [
        {
            "line": i,
            "log_prob": _finite(s.log_prob),
            "per_token": _finite(s.per_token),
            "ppl": _finite(s.ppl),
            "tokens": s.tokens,
        }
        for i, s in enumerate(scores, start=1)
    ]
    total = {k: _finite(v) if isinstance(v, float) else v for k, v in total.items()}
    return json.dumps(about | {"pairs": pairs, "total": total}, indent=1, ensure_ascii=False) + "\n"


def _summary(total: dict[str, Any], about: dict[str, Any]) -> str:
    skipped = total["sentences"] - total["scored"]
    lines = dict(about) | {
        "pairs": f"{total['sentences']}" + (f" ({skipped} with an empty source, not scored)" if skipped else ""),
        "tokens": f"{total['tokens']} target tokens scored (EOS included)",
        "mean NLL": f"{total['nll']:.4f} nats per token (token-weighted), perplexity {total['ppl']:.2f}",
    }
    return "\n".join(f"{key + ':':<10} {value}" for key, value in lines.items())


def run_score(args: argparse.Namespace) -> int:
    from transformer.commands.common import load_translator, progress_bar
    from transformer.decoding.scoring import totals
    from transformer.fileio import atomic_output, check_not_an_input

    if not args.checkpoint:
        raise UserError("--checkpoint is required: the model (or several, an ensemble) to score with")
    given = [("--src", args.src), ("--tgt", args.tgt), ("--config", args.config)]
    check_not_an_input(args.output, [*(("--checkpoint", c) for c in args.checkpoint), *given])
    translator, config, device = load_translator(args)
    sources, targets, description, files = _pairs(args, config)
    check_not_an_input(args.output, files)  # a config split's files
    with progress_bar(len(sources), args.quiet) as bar:
        scores = translator.score(sources, targets, progress=bar.update)
    total = totals(scores)
    about = {"checkpoint": " + ".join(args.checkpoint), "data": description}
    about["device"] = f"{device} {translator.precision}"
    text = format_scores(scores, total, args.json, about)
    to_file = args.output is not None and args.output != "-"
    if to_file:
        with atomic_output(args.output) as f:
            f.write(text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    print(_summary(total, about), file=sys.stdout if to_file else sys.stderr)
    return 0
