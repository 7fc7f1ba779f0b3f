"""Corpus scores with sacreBLEU's own API: BLEU, chrF (chrF++) and TER with their signatures, several references,
paired significance tests between systems, and the paper's tokenized BLEU as a labelled extra.

What the scores mean:
- `bleu`: sacreBLEU on detokenized text (13a tokenization, mixed case, exponential smoothing), the comparable
  number; reported with its signature, e.g. `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`.
  It equals the `sacrebleu` command line's score on the same files.
- `chrf`: sacreBLEU's chrF2 (character n-grams), with its signature; `sentence_chrf`: each line's own chrF2
  (sacreBLEU's `sentence_score`), what the confidence is calibrated against (training/calibration.py).
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
  -m ... --paired-bs|--paired-ar` computes. Files are read a chunk of lines at a time and only the metrics'
  sufficient statistics are kept (`score_rows`, corpus_stats.py), so memory does not grow with their length.
- Test sets by sacreBLEU name (`wmt14/full`, `en-de`) are downloaded by sacreBLEU into ~/.sacrebleu; without the
  internet that fails with a `UserError` that says to pass local files instead.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from transformer.config import CHUNK_LINES
from transformer.corpus_stats import CorpusStats, aligned_lines, chunks, paired_test
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


def tok_bleu_metric(lang: str | None = None) -> tuple[BLEU, Callable[[str], str], str]:
    """(metric, prepare, tokenizer name) of the paper-style score: `prepare` tokenizes and compound-splits a line,
    the metric is BLEU without further tokenization or smoothing."""
    tokenize, name = paper_tokenizer(lang)
    return (
        BLEU(tokenize="none", smooth_method="none", force=True),
        lambda line: compound_split(tokenize(line.strip())),
        name,
    )


def _tok_bleu_detail(score: Any, name: str, metric: BLEU) -> str:
    return f"{score} ({name}, ##AT## compound split, {metric.get_signature()})"


def tokenized_bleu(hypotheses: list[str], references: list[str], lang: str | None = None) -> tuple[float, str]:
    """The paper-style score and its description line (see the module docstring); `lang`: the target language."""
    _check_parallel(hypotheses, references)
    metric, prepare, name = tok_bleu_metric(lang)
    score = metric.corpus_score([prepare(line) for line in hypotheses], [[prepare(line) for line in references]])
    return score.score, _tok_bleu_detail(score, name, metric)


def sentence_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> list[float]:
    """Each hypothesis's sentence-level chrF2 (0-100) against its one reference (sacreBLEU's `sentence_chrf`)."""
    _check_parallel(list(hypotheses), list(references))
    chrf = CHRF()
    return [chrf.sentence_score(h, [r]).score for h, r in zip(hypotheses, references)]


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
    names: Sequence[str],
    references: list[list[str]] | None = None,
    *,
    tokenize: str | None = None,
    lowercase: bool = False,
    chrf_word_order: int = 0,
) -> dict[str, Any]:
    """sacreBLEU metric objects by our name (references cached when given). `tokenize` and `lowercase` are BLEU's
    (and chrF's lowercase); TER keeps sacreBLEU's defaults (case-insensitive), as the `sacrebleu` command line does."""
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
    systems: dict[str, Iterable[str]],
    references: Sequence[Iterable[str]],
    *,
    reference_names: Sequence[str] = (),
    **options: Any,
) -> dict[str, Any]:
    """Score each system (name -> its lines) against one or more reference streams, through sacreBLEU: lists, or
    iterables read a chunk at a time (`score_rows`, which takes `options`); `reference_names` name the references
    in errors (default: "the reference", "reference 2", ...)."""
    names = list(reference_names) or ["the reference", *(f"reference {i}" for i in range(2, len(references) + 1))]
    if not references or not systems:
        raise UserError("nothing to score: give at least one system and one reference")
    rows = aligned_lines([*systems.values(), *references], [*systems, *names])
    return score_rows(rows, list(systems), names, **options)


def score_rows(
    rows: Iterable[Sequence[str]],
    system_names: list[str],
    reference_names: list[str],
    *,
    metrics: Sequence[str] = ("bleu", "chrf"),
    tokenize: str | None = None,
    lowercase: bool = False,
    chrf_word_order: int = 0,
    paired: str | None = None,
    paired_n: int = 0,
    tok_bleu: bool = False,
    lang: str | None = None,
    chunk_lines: int = CHUNK_LINES,
) -> dict[str, Any]:
    """Score line-aligned rows (each: a line of every system, then a line of every reference) through sacreBLEU, a
    chunk of `chunk_lines` rows at a time (corpus_stats.py: the scores are sacreBLEU's corpus scores exactly).

    paired: "bs" (paired bootstrap resampling) or "ar" (approximate randomisation) compares every system with the
    first one, the baseline, through `sacrebleu.significance.PairedTest` (seed SACREBLEU_SEED, 12345 by default;
    `paired_n` 0 = sacreBLEU's 1000 resamples / 10000 trials). tok_bleu: the first system's paper-style score
    against the first reference too (`lang`: the target language). Returns {"sentences", "references",
    "paired_test", "systems": [{"name", "scores": {metric name: {"score", "signature", "detail", and with a paired
    test "p_value", "mean", "ci"}}}]} (and "tok_bleu", "tok_bleu_detail", "tok_bleu_label"), metric names as
    sacreBLEU prints them (BLEU, chrF2, chrF2++, TER).
    """
    if paired and len(system_names) < 2:
        raise UserError("a paired test compares systems: give two or more with --hyp BASELINE SYSTEM ...")
    if len(system_names) > 1 and paired is None:
        log.info("several systems: scoring each; --paired-bs or --paired-ar tests the differences")
    objects = make_metrics(metrics, tokenize=tokenize, lowercase=lowercase, chrf_word_order=chrf_word_order)
    systems = [{key: CorpusStats(m, per_sentence=bool(paired)) for key, m in objects.items()} for _ in system_names]
    extra = tok_bleu_metric(lang) if tok_bleu else None
    paper = CorpusStats(extra[0], prepare=extra[1]) if extra else None
    sentences = _accumulate(rows, systems, paper, chunk_lines)
    if not sentences:
        raise UserError(f"nothing to score: {reference_names[0]} has no lines")
    results = [_system_record(name, system) for name, system in zip(system_names, systems)]
    record: dict[str, Any] = {"sentences": sentences, "references": len(reference_names), "systems": results}
    if paired:
        record["paired_test"] = _paired_test(dict(zip(system_names, systems)), results, paired, paired_n)
    if paper is not None:
        score = paper.score()
        record |= {
            "tok_bleu": score.score,
            "tok_bleu_detail": _tok_bleu_detail(score, extra[2], extra[0]),
            "tok_bleu_label": TOK_BLEU_LABEL,
        }
    return record


def _accumulate(
    rows: Iterable[Sequence[str]], systems: list[dict[str, CorpusStats]], paper: CorpusStats | None, chunk_lines: int
) -> int:
    """Add the rows to every system's statistics (and the first system's, first reference's paper-style BLEU), a
    chunk at a time; returns the number of rows."""
    sentences = 0
    for chunk in chunks(rows, chunk_lines):
        columns = list(zip(*chunk))  # a tuple of lines for each system, then each reference
        for hypotheses, system in zip(columns, systems):
            for stats in system.values():
                stats.add(hypotheses, columns[len(systems) :])
        if paper is not None:
            paper.add(columns[0], columns[len(systems) : len(systems) + 1])
        for stats in systems[0].values():  # the systems share their metrics, and the metrics' tokenizers
            stats.clear_caches()
        sentences += len(chunk)
    return sentences


def _system_record(name: str, system: dict[str, CorpusStats]) -> dict[str, Any]:
    """One system's corpus scores: metric name as sacreBLEU prints it -> {"score", "signature", "detail"}; a warning
    when its output looks tokenized, as sacreBLEU gives."""
    scores = {}
    for stats in system.values():
        score = stats.score()
        scores[score.name] = {
            "score": score.score,
            "signature": str(stats.metric.get_signature()),
            "detail": str(score),
        }
        if stats.tokenized_periods >= 100:
            log.warning(
                "%s: %d lines end in a tokenized period (' .'): it looks like the output is not detokenized, "
                "which lowers BLEU",
                name,
                stats.tokenized_periods,
            )
    return {"name": name, "scores": scores}


def _paired_test(
    systems: dict[str, dict[str, CorpusStats]], results: list[dict[str, Any]], paired: str, paired_n: int
) -> dict[str, Any]:
    """sacreBLEU's `PairedTest` of every system against the first (corpus_stats.paired_test): adds "p_value",
    "mean", "ci" and the test's signature to each of `results`' scores; returns the test's description."""
    n_samples, signatures, table = paired_test(systems, test_type=paired, n_samples=paired_n)
    for metric_name, signature in signatures.items():
        for system, result in zip(results, table[metric_name]):
            values = {k: None if v is None else float(v) for k, v in vars(result).items()}
            system["scores"][metric_name].update(values, signature=signature.format())
    return {"type": paired, "n": n_samples, "baseline": next(iter(systems))}


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
    args = Namespace(
        format="text",
        width=1,
        paired_bs=paired.get("type") == "bs",
        paired_ar=paired.get("type") == "ar",
        paired_bs_n=paired.get("n"),
        paired_ar_n=paired.get("n"),
    )
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
