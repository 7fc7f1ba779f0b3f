"""The work of `transformer-evaluate` (cli.py parses its arguments; common.py loads the checkpoint).

Translates a test set (the config's `data.test`, or `--split valid`, or `--src F --ref F`, or a sacreBLEU test set
with `--test-set NAME --langpair xx-yy`), writes the hypotheses (default: next to the checkpoint,
`<checkpoint without .pt>.<test set>.hyp`; for an ensemble of M checkpoints, `<first checkpoint without
.pt>.ensembleM.<test set>.hyp`), and prints which checkpoint, test set and decoding settings produced
the scores; `--json F` writes the same as JSON. `--hyp F --ref F` scores existing output without a model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from transformer.commands.common import describe_decode, load_translator, progress_bar, stdin_lines
from transformer.config import Config, SplitConfig
from transformer.errors import UserError
from transformer.fileio import atomic_output, check_not_an_input, write_text


def _describe_split(name: str, split: SplitConfig) -> str:
    from transformer.data.corpus import describe_split

    where = describe_split(split)
    return f"config data.{name}: {where}" + (f", first {split.max_examples}" if split.max_examples else "")


def _test_set(args: argparse.Namespace, config: Config) -> tuple[list[str], list[str], str, str]:
    """(sources, references, description, short name for the hypothesis file)."""
    from transformer.data.corpus import load_pairs
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
    from transformer.data.corpus import read_lines

    if path == "-":
        return [line.strip() for line in stdin_lines()]
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
    inputs = [*(("--checkpoint", c) for c in args.checkpoint or []), ("--config", args.config), ("--src", args.src)]
    inputs += [("--ref", ref) for ref in args.ref or []]
    split = getattr(config.data, args.split) if not (args.src or args.test_set) else None
    if split:
        from transformer.data.corpus import input_files

        inputs += [(f"data.{args.split}", p) for p in input_files(split)]
    check_not_an_input(output, inputs)
    check_not_an_input(args.json, [*inputs, ("the hypotheses file", output)])


def run_evaluate(args: argparse.Namespace) -> int:
    if args.hyp:
        return _score_files(args)
    if not args.checkpoint:
        raise UserError("give --checkpoint CKPT to translate a test set, or --hyp F --ref F to score a file")
    for path in args.checkpoint:
        if not Path(path).is_file():
            raise UserError(f"checkpoint not found: {path}")
    translator, config, device = load_translator(args)
    sources, references, description, name = _test_set(args, config)
    checkpoint, models = Path(args.checkpoint[0]), len(args.checkpoint)
    stem = checkpoint.stem + (f".ensemble{models}" if models > 1 else "")  # an ensemble's beside its first model's
    output = Path(args.output) if args.output else checkpoint.parent / f"{stem}.{name}.hyp"
    _check_outputs(args, config, output)
    with progress_bar(len(sources), args.quiet) as bar:
        hypotheses = [results[0].text for results in translator.translate(sources, progress=bar.update)]
    if args.output == "-":
        sys.stdout.writelines(h + "\n" for h in hypotheses)
        sys.stdout.flush()
    else:
        with atomic_output(output) as f:
            f.writelines(h + "\n" for h in hypotheses)
    extra_refs = [_read_text(ref) for ref in args.ref[1:]] if args.ref else []
    scores = _scores({str(output): hypotheses}, [references, *extra_refs], args, lang=config.data.tgt_lang)
    lines = {"checkpoint": " + ".join(args.checkpoint), "test set": f"{description}, {len(sources)} sentences",
             "decoding": describe_decode(config.decode), "device": f"{device} {translator.precision}",
             "hypotheses": "standard output" if args.output == "-" else str(output)}  # fmt: skip
    _report(lines, scores, args.json, to_stderr=args.output == "-", decode=config.to_dict()["decode"])
    return 0
