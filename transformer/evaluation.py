"""Corpus scores with sacreBLEU's own API: BLEU, chrF (chrF++) and TER with their signatures, several references,
paired significance tests between systems, and the paper's tokenized BLEU as a labelled extra.

What the scores mean:
- `bleu`: sacreBLEU on detokenized text (13a tokenization, mixed case, exponential smoothing), the comparable
  number; reported with its signature, e.g. `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`.
  It equals the `sacrebleu` command line's score on the same files.
- `chrf`: sacreBLEU's chrF2 (character n-grams), with its signature.
- `tok_bleu` (on request): the paper's way, "tokenized BLEU with compound splitting" as tensor2tensor's
  get_ende_bleu.sh did it: tokenize both sides, rewrite every `(\\S)-(\\S)` to `\\1 ##AT##-##AT## \\2`, then
  multi-bleu.perl-style BLEU (no further tokenization, no smoothing). The Moses tokenizer comes from `sacremoses`
  when it is installed (the `moses` extra; `-l <target language> -no-escape`, as the paper's scripts ran it);
  without it sacreBLEU's 13a tokenizer stands in (the mteval one; it differs from Moses mainly on apostrophes). The
  detail line names the tokenizer used. Worth ~0.7-1 BLEU more than sacreBLEU on WMT14 EN-DE, and never comparable
  to it: it is always labelled `TOK_BLEU_LABEL`.
- `score_systems`: any of BLEU / chrF / TER (`chrf_word_order=2` is chrF++), BLEU's `tokenize` and `lowercase`,
  several reference streams, and for two or more systems sacreBLEU's `PairedTest` (paired bootstrap resampling or
  approximate randomisation against the first system, the baseline), exactly what `sacrebleu REF... -i SYS...
  -m ... --paired-bs|--paired-ar` computes.
- Test sets by sacreBLEU name (`wmt14/full`, `en-de`) are downloaded by sacreBLEU into ~/.sacrebleu; without the
  internet that fails with a `UserError` that says to pass local files instead.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from transformer.errors import UserError

log = logging.getLogger(__name__)

TOK_BLEU_LABEL = "tokenized BLEU (paper-style, compound-split), not comparable to sacreBLEU"
_COMPOUND = re.compile(r"(\S)-(\S)")


def compound_split(text: str) -> str:
    """`(\\S)-(\\S)` -> `\\1 ##AT##-##AT## \\2`, non-overlapping as perl's s///g ("a-b-c" keeps one hyphen)."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", text)


def _check_parallel(hypotheses: list[str], references: list[str]) -> None:
    if len(hypotheses) != len(references):
        raise UserError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: they must be line-aligned, one per line"
        )
    if not references:
        raise UserError("nothing to score: the reference is empty")


def paper_tokenizer(lang: str | None = None) -> tuple[Callable[[str], str], str]:
    """(tokenize, name): the Moses tokenizer from sacremoses when installed, else sacreBLEU's 13a as a stand-in."""
    try:
        from sacremoses import MosesTokenizer
    except ImportError:
        return Tokenizer13a(), "13a tokens (sacremoses not installed: pip install sacremoses for Moses)"
    moses = MosesTokenizer(lang=lang or "en")
    return lambda line: moses.tokenize(line, return_str=True, escape=False), f"Moses tokens (sacremoses, -l {lang})"


def tokenized_bleu(hypotheses: list[str], references: list[str], lang: str | None = None) -> tuple[float, str]:
    """The paper-style score and its description line (see the module docstring); `lang`: the target language."""
    _check_parallel(hypotheses, references)
    tokenize, name = paper_tokenizer(lang)
    prepare = lambda lines: [compound_split(tokenize(line.strip())) for line in lines]
    metric = BLEU(tokenize="none", smooth_method="none", force=True)
    score = metric.corpus_score(prepare(hypotheses), [prepare(references)])
    return score.score, f"{score} ({name}, ##AT## compound split, {metric.get_signature()})"


def corpus_scores(
    hypotheses: list[str], references: list[str], *, tok_bleu: bool = False, lang: str | None = None
) -> dict[str, Any]:
    """sacreBLEU BLEU and chrF of line-aligned detokenized text, with signatures; `tok_bleu` adds the paper's.

    Returns {"bleu", "bleu_signature", "bleu_detail", "chrf", "chrf_signature", "sentences"}, plus
    {"tok_bleu", "tok_bleu_detail", "tok_bleu_label"} when asked. Scores are 0-100.
    """
    _check_parallel(hypotheses, references)
    bleu, chrf = BLEU(), CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    scores: dict[str, Any] = {
        "bleu": bleu_score.score,
        "bleu_signature": str(bleu.get_signature()),
        "bleu_detail": str(bleu_score),
        "chrf": chrf_score.score,
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(references),
    }
    if tok_bleu:
        scores["tok_bleu"], scores["tok_bleu_detail"] = tokenized_bleu(hypotheses, references, lang)
        scores["tok_bleu_label"] = TOK_BLEU_LABEL
    return scores


def format_scores(scores: dict[str, Any]) -> str:
    """Human-readable lines: each score with its signature (and the tokenized BLEU's label)."""
    lines = [
        f"BLEU  {scores['bleu']:.2f}  {scores['bleu_signature']}",
        f"      {scores['bleu_detail']}",
        f"chrF2 {scores['chrf']:.2f}  {scores['chrf_signature']}",
    ]
    if "tok_bleu" in scores:
        lines.append(f"{scores['tok_bleu_label']}: {scores['tok_bleu']:.2f}")
        lines.append(f"      {scores['tok_bleu_detail']}")
    return "\n".join(lines)


METRIC_NAMES = ("bleu", "chrf", "ter")
TOKENIZERS = ("13a", "intl", "zh", "ja-mecab", "ko-mecab", "char", "none", "flores101", "flores200")


def make_metrics(
    names: Sequence[str], references: list[list[str]], *, tokenize: str | None = None, lowercase: bool = False,
    chrf_word_order: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """sacreBLEU metric objects by our name, references cached. `tokenize` and `lowercase` are BLEU's (and chrF's
    lowercase); TER keeps sacreBLEU's defaults (case-insensitive), as the `sacrebleu` command line does."""
    metrics: dict[str, Any] = {}
    try:
        for name in dict.fromkeys(names):
            if name == "bleu":
                metrics[name] = BLEU(tokenize=tokenize, lowercase=lowercase, references=references)
            elif name == "chrf":
                metrics[name] = CHRF(word_order=chrf_word_order, lowercase=lowercase, references=references)
            elif name == "ter":
                metrics[name] = TER(references=references)
            else:
                raise UserError(f"unknown metric {name!r}: choose among {', '.join(METRIC_NAMES)}")
    except (RuntimeError, ImportError) as exc:  # e.g. ja-mecab without `pip install sacrebleu[ja]`
        raise UserError(" ".join(str(exc).split())) from None
    return metrics


def score_systems(
    systems: dict[str, list[str]], references: list[list[str]], *, metrics: Sequence[str] = ("bleu", "chrf"),
    tokenize: str | None = None, lowercase: bool = False, chrf_word_order: int = 0, paired: str | None = None,
    paired_n: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """Score each system (name -> hypotheses) against one or more reference streams, through sacreBLEU.

    paired: "bs" (paired bootstrap resampling) or "ar" (approximate randomisation) compares every system with the
    first one, the baseline, through `sacrebleu.significance.PairedTest` (seed SACREBLEU_SEED, 12345 by default;
    `paired_n` 0 = sacreBLEU's 1000 resamples / 10000 trials). Returns {"sentences", "references", "paired_test",
    "systems": [{"name", "scores": {metric name: {"score", "signature", "detail", and with a paired test "p_value",
    "mean", "ci"}}}]}, metric names as sacreBLEU prints them (BLEU, chrF2, chrF2++, TER).
    """
    _check_systems(systems, references)
    if len(systems) > 1 and paired is None:
        log.info("several systems: scoring each; --paired-bs or --paired-ar tests the differences")
    options = dict(tokenize=tokenize, lowercase=lowercase, chrf_word_order=chrf_word_order)
    objects = make_metrics(metrics, references, **options)
    results = [{"name": name, "scores": _system_scores(objects, hyps)} for name, hyps in systems.items()]
    record: dict[str, Any] = {"sentences": len(references[0]), "references": len(references), "systems": results}
    if paired:
        if len(systems) < 2:
            raise UserError("a paired test compares systems: give two or more with --hyp BASELINE SYSTEM ...")
        fresh = make_metrics(metrics, references, **options)
        record["paired_test"] = _paired_test(systems, results, fresh, paired=paired, paired_n=paired_n)
    return record


def _check_systems(systems: dict[str, list[str]], references: list[list[str]]) -> None:
    """At least one system and one reference stream, all of the same length."""
    if not references or not systems:
        raise UserError("nothing to score: give at least one system and one reference")
    for ref in references[1:]:
        if len(ref) != len(references[0]):
            raise UserError(f"the references differ in length ({len(references[0])} and {len(ref)} lines)")
    for name, hyps in systems.items():
        if len(hyps) != len(references[0]):
            raise UserError(f"{name} has {len(hyps)} lines but the reference has {len(references[0])}")


def _system_scores(metrics: dict[str, Any], hypotheses: list[str]) -> dict[str, dict[str, Any]]:
    """One system's corpus scores: metric name as sacreBLEU prints it -> {"score", "signature", "detail"}."""
    scores = {}
    for metric in metrics.values():
        score = metric.corpus_score(hypotheses, None)
        scores[score.name] = {"score": score.score, "signature": str(metric.get_signature()), "detail": str(score)}
    return scores


def _paired_test(
    systems: dict[str, list[str]], results: list[dict[str, Any]], metrics: dict[str, Any], *, paired: str,
    paired_n: int,
) -> dict[str, Any]:  # fmt: skip
    """sacreBLEU's `PairedTest` of every system against the first, on unused `metrics` objects: adds "p_value",
    "mean", "ci" and the test's signature to each of `results`' scores; returns the test's description."""
    from sacrebleu.significance import PairedTest

    test = PairedTest(list(systems.items()), metrics, references=None, test_type=paired, n_samples=paired_n)
    signatures, table = test()
    for metric_name, signature in signatures.items():
        for system, result in zip(results, table[metric_name]):
            values = {k: None if v is None else float(v) for k, v in vars(result).items()}
            system["scores"][metric_name].update(values, signature=signature.format())
    return {"type": paired, "n": test.n_samples, "baseline": next(iter(systems))}


def format_systems(record: dict[str, Any]) -> str:
    """One system: each score with its signature and detail line. Several: sacreBLEU's own table (and its paired
    test explanation) followed by the signatures."""
    systems = record["systems"]
    if len(systems) == 1 and "paired_test" not in record:
        lines = []
        for name, score in systems[0]["scores"].items():
            lines.append(f"{name:<7} {score['score']:.2f}  {score['signature']}")
            if score["detail"].startswith("BLEU"):
                lines.append(f"        {score['detail']}")
        return "\n".join(lines)
    import contextlib
    import io
    import sys
    from argparse import Namespace

    from sacrebleu.significance import Result
    from sacrebleu.utils import Color, print_results_table

    paired = record.get("paired_test") or {}
    table: dict[str, list[Any]] = {"System": [s["name"] for s in systems]}
    if paired:
        table["System"][0] = f"Baseline: {table['System'][0]}"
    for metric in systems[0]["scores"]:
        column = [s["scores"][metric] for s in systems]
        table[metric] = [Result(c["score"], c.get("p_value"), c.get("mean"), c.get("ci")) for c in column]
        if not paired:
            table[metric] = [f"{r.score:.1f}" for r in table[metric]]
    signatures = {m: systems[0]["scores"][m]["signature"] for m in systems[0]["scores"]}
    args = Namespace(format="text", width=1, paired_bs=paired.get("type") == "bs", paired_ar=paired.get("type") == "ar",
                     paired_bs_n=paired.get("n"), paired_ar_n=paired.get("n"))  # fmt: skip
    buffer, colors = io.StringIO(), Color.ENABLE_COLORS
    Color.ENABLE_COLORS = sys.stdout.isatty()
    try:
        with contextlib.redirect_stdout(buffer):
            print_results_table(table, signatures, args)
    finally:
        Color.ENABLE_COLORS = colors
    return buffer.getvalue().rstrip()


def sacrebleu_test_set(name: str, langpair: str) -> tuple[list[str], list[str]]:
    """(source lines, reference lines) of a sacreBLEU test set such as ("wmt14/full", "en-de"); downloads once."""
    from sacrebleu.dataset import DATASETS

    if name not in DATASETS:
        close = difflib.get_close_matches(name, list(DATASETS), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UserError(f"unknown sacreBLEU test set {name!r}{hint}; `sacrebleu --list` shows them all")
    dataset = DATASETS[name]
    if langpair not in dataset.langpairs:
        pairs = ", ".join(p for p in dataset.langpairs if "-" in p)
        raise UserError(f"sacreBLEU test set {name} has no language pair {langpair!r}; it has: {pairs}")
    try:
        source = dataset.get_source_file(langpair)
        references = dataset.get_reference_files(langpair)
    except (Exception, SystemExit) as exc:  # sacrebleu calls sys.exit(1) when a download fails
        raise UserError(
            f"could not get sacreBLEU test set {name} {langpair} ({exc or 'download failed'}): it is downloaded from "
            "the internet on first use; offline, pass local files with --src F --ref F"
        ) from None
    if len(references) > 1:
        log.warning("%s %s has %d references; scoring against the first", name, langpair, len(references))
    return _read_plain(source), _read_plain(references[0])


def _read_plain(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]
