"""Corpus scores with sacreBLEU: BLEU and chrF with their signatures, and the paper's tokenized BLEU as an extra.

What the scores mean (SEED-NOTES section 6):
- `bleu`: sacreBLEU on detokenized text (13a tokenization, mixed case, exponential smoothing), the comparable
  number; reported with its signature, e.g. `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`.
  It equals the `sacrebleu` command line's score on the same files.
- `chrf`: sacreBLEU's chrF2 (character n-grams), with its signature.
- `tok_bleu` (on request): the paper's way, "tokenized BLEU with compound splitting" as tensor2tensor's
  get_ende_bleu.sh did it: tokenize both sides, rewrite every `(\\S)-(\\S)` to `\\1 ##AT##-##AT## \\2`, then
  multi-bleu.perl-style BLEU (no further tokenization, no smoothing). sacremoses is not a dependency, so the
  Moses tokenizer is approximated by sacreBLEU's 13a tokenizer (the mteval one; it differs from Moses mainly on
  apostrophes). Worth ~0.7-1 BLEU more than sacreBLEU on WMT14 EN-DE, and never comparable to it: it is always
  labelled `TOK_BLEU_LABEL`.
- Test sets by sacreBLEU name (`wmt14/full`, `en-de`) are downloaded by sacreBLEU into ~/.sacrebleu; without the
  internet that fails with a `UserError` that says to pass local files instead.
"""

from __future__ import annotations

import difflib
import logging
import re
from typing import Any

from sacrebleu.metrics import BLEU, CHRF
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


def tokenized_bleu(hypotheses: list[str], references: list[str]) -> tuple[float, str]:
    """The paper-style score and its description line (see the module docstring)."""
    _check_parallel(hypotheses, references)
    tokenize = Tokenizer13a()
    prepare = lambda lines: [compound_split(tokenize(line.strip())) for line in lines]
    metric = BLEU(tokenize="none", smooth_method="none", force=True)
    score = metric.corpus_score(prepare(hypotheses), [prepare(references)])
    return score.score, f"{score} (13a tokens, ##AT## compound split, {metric.get_signature()})"


def corpus_scores(hypotheses: list[str], references: list[str], *, tok_bleu: bool = False) -> dict[str, Any]:
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
        scores["tok_bleu"], scores["tok_bleu_detail"] = tokenized_bleu(hypotheses, references)
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
