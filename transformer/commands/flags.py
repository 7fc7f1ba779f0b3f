"""The flags the commands share: a config and its overrides (prepare, train), and the model, decoding and scoring
flags of the commands that decode (translate, evaluate, score)."""

from __future__ import annotations

import argparse

from transformer.commands.parsers import count
from transformer.config import CHUNK_LINES, PRECISIONS, DecodeConfig, choices
from transformer.errors import UserError

DOCUMENT_FORMATS = (
    "text",
    "html",
    "markdown",
    "srt",
    "vtt",
    "docx",
    "po",
    "xliff",
)  # transformer.documents.FORMATS (tested)


def config_args(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument(
        "--config",
        required=required,
        help="YAML config file, or the name of a shipped config "
        "(demo, tiny, student, base, big, bible_es_en, wmt14_en_{de,fr}_{base,big})",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set model.d_model=256 --set train.lr=5e-4 (repeatable)",
    )


def model_args(parser: argparse.ArgumentParser) -> None:
    """Checkpoint(s), config overrides, batch size, device, precision, threads: translate, evaluate and score's."""
    parser.add_argument("--checkpoint", nargs="+", metavar="CKPT", help="checkpoint file(s); several: an ensemble")
    config_args(parser, required=False)
    parser.add_argument("--max-tokens", type=int, help="source tokens per decoding batch")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    precision = "autocast: bf16 (CUDA or CPU), fp16 (CUDA), auto (bf16 on a GPU that has it, else fp32)"
    parser.add_argument("--precision", choices=PRECISIONS, help=f"{precision}; default: the config's decode.precision")
    parser.add_argument("--threads", type=count(0), default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def decoding_args(parser: argparse.ArgumentParser) -> None:
    model_args(parser)  # then the search's flags: translate's and evaluate's
    parser.add_argument("--beam", type=int, help="beam size K (1 = greedy); default: the config's decode.beam_size")
    parser.add_argument("--alpha", type=float, help="length penalty exponent (paper: 0.6)")
    parser.add_argument(
        "--length-penalty", choices=choices(DecodeConfig, "length_penalty"), help="gnmt ((5+len)/6)^alpha: paper"
    )
    parser.add_argument("--max-len-a", type=float, help="maximum output length = a * source length + b (paper: 1)")
    parser.add_argument("--max-len-b", type=int, help="see --max-len-a (paper: 50)")
    parser.add_argument("--min-len", type=int, help="no EOS before this many output tokens")
    parser.add_argument(
        "--no-repeat-ngram-size",
        type=count(0),
        metavar="N",
        help="no n-gram of N output pieces twice in a translation (0 = off)",
    )
    parser.add_argument(
        "--max-ngram-repeats",
        type=count(0),
        metavar="N",
        help="no n-gram of output pieces more than N times in a row, any n: cuts loops (0 = off; default: 2)",
    )


def translate_args(parser: argparse.ArgumentParser) -> None:
    """TEXT, the decoding flags, then where lines come from and go, and how many at a time."""
    parser.add_argument("text", nargs="*", metavar="TEXT", help="sentences to translate, one per argument")
    decoding_args(parser)
    parser.add_argument("--nbest", type=int, help="print the best N as 'index ||| text ||| score' lines")
    parser.add_argument(
        "--alignment",
        action="store_true",
        help="append each line's word alignment (Pharaoh 'i-j': "
        "source word i, target word j) after a tab (with --nbest: after ' ||| ')",
    )
    parser.add_argument(
        "--alignment-layer",
        type=int,
        metavar="N",
        help="with --alignment: the decoder layer whose "
        "attention over the source (mean over heads) aligns (0-based; default: the last)",
    )
    parser.add_argument(
        "--attention-maps",
        metavar="DIR",
        help="also draw each line's attention maps, every layer "
        "and head, as PNG files in DIR (the first 20 lines; needs matplotlib)",
    )
    steering_args(parser)
    confidence_args(parser)
    parser.add_argument("--input", help="input file, one sentence per line ('-' = stdin, the default)")
    document_args(parser)
    protection_args(parser)
    parser.add_argument("--output", help="output file ('-' or none: standard output)")
    parser.add_argument(
        "--chunk-lines", type=count(1), default=CHUNK_LINES, help="lines read (and sorted) at a time from a pipe"
    )


def steering_args(parser: argparse.ArgumentParser) -> None:
    """Prefixes, constraints, a glossary, the beams of the lines they steer, and <unk> replacement."""
    steer = parser.add_argument_group("steering the output (docs/decoding.md)")
    steer.add_argument(
        "--prefix-file",
        metavar="F",
        help="one target prefix per input line (empty line: none); each translation starts with it",
    )
    steer.add_argument(
        "--constraints-file",
        metavar="F",
        help="one JSON list of phrases per input line ([] = none) "
        "that the translation must contain, in any order (beam search)",
    )
    steer.add_argument(
        "--glossary",
        metavar="FILE",
        help="a TSV of terms, 'source<TAB>target[<TAB>cased]': the target of each term a line holds (whole words, "
        "any case unless cased) is a constraint of that line, beside --constraints-file's (beam search)",
    )
    steer.add_argument(
        "--constraint-beam",
        type=count(1),
        metavar="N",
        help="the beam of lines with constraints: at least N (default: the config's decode.constraint_beam_size, 10)",
    )
    steer.add_argument(
        "--glossary-beam",
        type=count(1),
        metavar="N",
        help="the beam of lines whose constraints are glossary terms only: at least N (default: the config's "
        "decode.glossary_beam_size, 4)",
    )
    steer.add_argument(
        "--replace-unk",
        action="store_true",
        help="replace each <unk> of a translation with the "
        "source text it is aligned to (last decoder layer; an ensemble: its first model)",
    )


def _threshold(text: str) -> float | str:
    """--min-confidence's value: a number in [0, 1], or "auto" (the checkpoint's threshold)."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1] or auto, got {text!r}")
    return value


def confidence_args(parser: argparse.ArgumentParser) -> None:
    """--confidence, --min-confidence and what happens to a line below it (commands/translate.py)."""
    group = parser.add_argument_group("confidence (docs/decoding.md)")
    group.add_argument(
        "--confidence",
        action="store_true",
        help="append each translation's confidence in [0, 1] after a tab (with --nbest: ' ||| ' after the score)",
    )
    group.add_argument(
        "--min-confidence",
        type=_threshold,
        metavar="X",
        help="translations whose confidence is below X (auto: the checkpoint's threshold, chosen on its validation "
        "set) are marked or left empty (--low-confidence); the number of lines never changes",
    )
    group.add_argument(
        "--low-confidence",
        choices=("mark", "empty"),
        default="mark",
        help="with --min-confidence: mark such a line with a '[?] ' prefix, or print an empty line instead",
    )


def document_args(parser: argparse.ArgumentParser) -> None:
    """--format and its option: a whole document instead of lines (commands/documents.py)."""
    parser.add_argument(
        "--format",
        nargs="?",
        const="auto",
        choices=("auto", *DOCUMENT_FORMATS),
        help="translate --input as one document of this format, its markup kept (auto, or no value: from the "
        "file's extension; needs the documents extra; docs/documents.md); without it, a file with a document's "
        "extension (.html, .md, .srt, .vtt, .docx, ...) is that document, any other input one line out per line in",
    )
    parser.add_argument(
        "--translate-attributes", action="store_true", help="with --format html: also translate alt and title"
    )
    parser.add_argument(
        "--retranslate",
        action="store_true",
        help="with --format po or xliff: translate again the entries already translated (else left alone)",
    )


def protection_args(parser: argparse.ArgumentParser) -> None:
    """What is kept as written (documents/spans.py): on by default, lines and documents alike."""
    group = parser.add_argument_group("protected spans (docs/documents.md)")
    group.add_argument(
        "--protect",
        action="append",
        default=[],
        metavar="REGEX",
        help="also keep as written what this regular expression matches (repeatable); placeholders, URLs, e-mail "
        "addresses, paths, --options, numbers and code are kept by default",
    )
    group.add_argument("--no-protect", action="store_true", help="keep nothing as written: the model reads it all")
    group.add_argument("--no-protect-numbers", action="store_true", help="let the model translate numbers")


def protection(args: argparse.Namespace):
    """The `Protection` of --protect, --no-protect and --no-protect-numbers (a bad pattern: one line)."""
    from transformer.documents.spans import Protection

    if args.no_protect and args.protect:
        raise UserError("--no-protect keeps nothing as written: drop it, or the --protect patterns")
    if args.no_protect:
        return Protection.off()
    return Protection(numbers=not args.no_protect_numbers, patterns=tuple(args.protect))


def scoring_args(parser: argparse.ArgumentParser) -> None:
    """sacreBLEU's scoring options, named as its own command line names them."""
    from transformer.evaluation import METRIC_NAMES, TOKENIZERS

    group = parser.add_argument_group("scoring (sacreBLEU)")
    group.add_argument(
        "--metrics", "-m", nargs="+", choices=METRIC_NAMES, default=["bleu", "chrf"], help="metrics to compute"
    )
    group.add_argument(
        "--tokenize",
        "-tok",
        choices=TOKENIZERS,
        help="BLEU tokenization (default: 13a; zh, ja-mecab, ko-mecab need sacreBLEU's extras)",
    )
    group.add_argument("--lowercase", "-lc", action="store_true", help="case-insensitive BLEU and chrF")
    group.add_argument("--chrf-word-order", "-cw", type=int, default=0, help="chrF word n-gram order (2 = chrF++)")
    paired = group.add_mutually_exclusive_group()
    paired.add_argument(
        "--paired-bs",
        action="store_true",
        help="paired bootstrap resampling test between --hyp systems, against the first",
    )
    paired.add_argument("--paired-ar", action="store_true", help="paired approximate randomisation test instead")
    group.add_argument(
        "--paired-n",
        type=int,
        default=0,
        help="resamples (bs) or trials (ar); 0 = sacreBLEU's defaults, 1000 and 10000",
    )
    group.add_argument(
        "--tok-bleu",
        action="store_true",
        help="also the paper's tokenized, compound-split BLEU "
        "(Moses tokenizer with sacremoses installed, else 13a; labelled)",
    )


def evaluate_args(parser: argparse.ArgumentParser) -> None:
    """The decoding flags, what to score (a split, files, a sacreBLEU test set or existing output), the
    scoring options and the outputs."""
    decoding_args(parser)
    parser.add_argument("--split", choices=["test", "valid"], default="test", help="which config split to score")
    parser.add_argument("--src", help="source file to translate (with --ref; '-' = standard input)")
    parser.add_argument(
        "--ref",
        nargs="+",
        metavar="REF",
        help="reference file(s), line-aligned; several = multi-reference scoring; '-' = standard input",
    )
    parser.add_argument("--test-set", help="a sacreBLEU test set, e.g. wmt14/full (downloaded; needs the internet)")
    parser.add_argument("--langpair", help="with --test-set, e.g. en-de")
    parser.add_argument(
        "--hyp",
        nargs="+",
        metavar="SYS",
        help="score existing output(s) against --ref, without "
        "a model; several systems: the first is the paired tests' baseline; '-' = stdin",
    )
    scoring_args(parser)
    parser.add_argument(
        "--output",
        help="hypotheses file (default: <checkpoint>.<test set>.hyp next to it; "
        "'-' = standard output, the report then goes to standard error)",
    )
    parser.add_argument(
        "--json",
        help="also write the scores, signatures and what produced them as JSON to this "
        "file ('-' = standard output, the report then goes to standard error)",
    )
