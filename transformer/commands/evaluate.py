"""The work of `transformer-evaluate` (cli.py parses its arguments; common.py loads the checkpoint).

Translates a test set (the config's `data.test`, or `--split valid`, or `--src F --ref F`, or a sacreBLEU test set
with `--test-set NAME --langpair xx-yy`), writes the hypotheses (default: next to the checkpoint,
`<checkpoint without .pt>.<test set>.hyp`; for an ensemble of M checkpoints, `<first checkpoint without
.pt>.ensembleM.<test set>.hyp`), and prints which checkpoint, test set and decoding settings produced
the scores; `--json F` writes the same as JSON. `--hyp F --ref F` scores existing output without a model.

Files are streamed: sources are translated, hypotheses written and scored a chunk of lines at a time, and only the
metrics' sufficient statistics are kept (evaluation.score_rows; with --paired-bs/--paired-ar, each sentence's), so
memory does not grow with the test set. A config split and a sacreBLEU test set are read whole by the data module.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

from transformer.commands.common import describe_decode, load_translator, progress_bar, stdin_lines
from transformer.config import Config, SplitConfig
from transformer.errors import UserError
from transformer.fileio import atomic_output, check_not_an_input, write_text


def _describe_split(name: str, split: SplitConfig) -> str:
    from transformer.data.corpus import describe_split

    where = describe_split(split)
    return f"config data.{name}: {where}" + (f", first {split.max_examples}" if split.max_examples else "")


class TestSet(NamedTuple):
    """What to translate and score: the source and reference streams, their names, and the number of lines when
    known beforehand (the progress bar's total)."""

    sources: Iterable[str]
    references: list[Iterable[str]]
    names: list[str]  # the source's, then each reference's (in error messages)
    description: str
    short_name: str  # in the default hypotheses file's name
    total: int | None


def _test_set(args: argparse.Namespace, config: Config) -> TestSet:
    """The test set the arguments name: --src F --ref F... (streamed), a sacreBLEU test set, or a config split
    (held in memory: read by the data module)."""
    from transformer.data.corpus import load_pairs
    from transformer.evaluation import sacrebleu_test_set

    if args.test_set:
        if not args.langpair:
            raise UserError("--test-set needs --langpair, e.g. --test-set wmt14/full --langpair en-de")
        sources, references = sacrebleu_test_set(args.test_set, args.langpair)
        name = f"{args.test_set.replace('/', '-')}.{args.langpair}"
        description = f"sacreBLEU {args.test_set} {args.langpair}"
        return TestSet(
            sources, [references], [f"{description} source", "its reference"], description, name, len(sources)
        )
    if args.src or args.ref:
        if not (args.src and args.ref):
            raise UserError("--src and --ref go together (or use --hyp F --ref F to score existing output)")
        total, description = _check_aligned([args.src, *args.ref]), f"{args.src} -> {' '.join(args.ref)}"
        references = [_stream_text(ref) for ref in args.ref]
        return TestSet(
            _stream_text(args.src), references, _names([args.src, *args.ref]), description, Path(args.src).name, total
        )
    split = getattr(config.data, args.split)
    if split is None:
        raise UserError(f"the config has no data.{args.split} split: pass --src F --ref F or --test-set NAME")
    sources, references = load_pairs(split, config.data)
    description = _describe_split(args.split, split)
    return TestSet(
        sources,
        [references],
        [f"data.{args.split} source", f"data.{args.split} target"],
        description,
        args.split,
        len(sources),
    )


def _check_aligned(paths: list[str]) -> int | None:
    """The files' common number of lines, counted without holding them (None when the first is standard input);
    files of different lengths are refused before anything is translated."""
    from transformer.data.corpus import count_lines

    counts = {path: count_lines(path) for path in paths if path != "-"}
    first = next(iter(counts), None)
    for path, count in counts.items():
        if count != counts[first]:
            raise UserError(f"{first} has {counts[first]} lines but {path} has {count}")
    return counts.get(paths[0])


def _stream_text(path: str) -> Iterator[str]:
    """Lines of a file, or of standard input for `-`, stripped, read lazily (the file is checked at once)."""
    from transformer.data.corpus import stream_lines

    if path == "-":
        return (line.strip() for line in stdin_lines())
    return stream_lines(path)


def _names(paths: list[str]) -> list[str]:
    return ["standard input" if path == "-" else path for path in paths]


def _scores(
    rows: Iterable[Sequence[str]], systems: list[str], references: list[str], args: argparse.Namespace, lang=None
) -> dict[str, Any]:
    """sacreBLEU's scores of every system (evaluation.score_rows, reading `rows` a chunk at a time) as a record,
    plus the first system's under the flat keys (bleu, bleu_signature, chrf, ter, ...) and the paper-style BLEU on
    request."""
    from transformer.evaluation import score_rows

    paired = "bs" if args.paired_bs else "ar" if args.paired_ar else None
    record = score_rows(
        rows,
        systems,
        references,
        metrics=args.metrics,
        tokenize=args.tokenize,
        lowercase=args.lowercase,
        chrf_word_order=args.chrf_word_order,
        paired=paired,
        paired_n=args.paired_n,
        tok_bleu=args.tok_bleu,
        lang=lang,
    )
    for name, score in record["systems"][0]["scores"].items():
        key = "chrf" if name.startswith("chrF") else name.lower()
        record |= {key: score["score"], f"{key}_signature": score["signature"], f"{key}_detail": score["detail"]}
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
    from transformer.corpus_stats import aligned_lines

    if args.checkpoint or args.src or args.test_set:
        raise UserError("--hyp scores existing output against --ref; it takes no --checkpoint, --src or --test-set")
    if not args.ref:
        raise UserError("--hyp needs --ref, the reference file(s) to score it against")
    if [*args.hyp, *args.ref].count("-") > 1:
        raise UserError("only one of --hyp and --ref can be '-' (standard input)")
    if len(set(args.hyp)) < len(args.hyp):
        twice = next(h for h in args.hyp if args.hyp.count(h) > 1)
        raise UserError(f"{twice} is given twice to --hyp; each system once")
    check_not_an_input(args.json, [*(("--hyp", h) for h in args.hyp), *(("--ref", r) for r in args.ref)])
    streams = [_stream_text(path) for path in [*args.hyp, *args.ref]]
    rows = aligned_lines(streams, _names([*args.hyp, *args.ref]))
    scores = _scores(rows, args.hyp, _names(args.ref), args)
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


def _translated(translator, test: TestSet, out: IO[str], progress) -> Iterator[tuple[str, ...]]:
    """(hypothesis, reference, ...) rows: the sources translated as they are read, each hypothesis written to `out`;
    the references of the lines being translated wait in a queue (one chunk of lines at most)."""
    from transformer.corpus_stats import aligned_lines

    pending: collections.deque = collections.deque()

    def sources() -> Iterator[str]:
        for source, *references in aligned_lines([test.sources, *test.references], test.names):
            pending.append(references)
            yield source

    for results in translator.translate(sources(), progress=progress):
        out.write(results[0].text + "\n")
        yield results[0].text, *pending.popleft()


def run_evaluate(args: argparse.Namespace) -> int:
    if args.hyp:
        return _score_files(args)
    if not args.checkpoint:
        raise UserError("give --checkpoint CKPT to translate a test set, or --hyp F --ref F to score a file")
    for path in args.checkpoint:
        if not Path(path).is_file():
            raise UserError(f"checkpoint not found: {path}")
    translator, config, device = load_translator(args)
    test = _test_set(args, config)
    checkpoint, models = Path(args.checkpoint[0]), len(args.checkpoint)
    stem = checkpoint.stem + (f".ensemble{models}" if models > 1 else "")  # an ensemble's beside its first model's
    output = Path(args.output) if args.output else checkpoint.parent / f"{stem}.{test.short_name}.hyp"
    _check_outputs(args, config, output)
    to_stdout = args.output == "-"
    destination = contextlib.nullcontext(sys.stdout) if to_stdout else atomic_output(output)
    with destination as out, progress_bar(test.total, args.quiet) as bar:  # the file appears once all is scored
        rows = _translated(translator, test, out, bar.update)
        scores = _scores(rows, [str(output)], test.names[1:], args, lang=config.data.tgt_lang)
    lines = {
        "checkpoint": " + ".join(args.checkpoint),
        "test set": f"{test.description}, {scores['sentences']} sentences",
        "decoding": describe_decode(config.decode),
        "device": f"{device} {translator.precision}",
        "hypotheses": "standard output" if to_stdout else str(output),
    }
    _report(lines, scores, args.json, to_stderr=to_stdout, decode=config.to_dict()["decode"])
    return 0
