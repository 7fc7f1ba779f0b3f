"""A glossary measured on a test set (scripts/benchmark_glossary.py): the same lines translated without and with it,
by the same translator, taking turns.

- Terms kept: for each line, the target terms of the terms its source holds (decoding/glossary.py's matching, the
  same that steers the search), and the share of those (line, term) pairs whose target term is in the output, on
  word boundaries, as written (`exact`, what the constraint asks) and in any case (`any_case`), without and with
  the glossary; and the same share in the reference, what the glossary's pairs are worth on this test set.
- The other lines (whose source holds no term): their chrF without and with the glossary, and how many outputs
  differ (a line without a term is searched as without a glossary: 0 expected).
- chrF and BLEU of all lines and of the lines with a term, without and with; the lines whose constraints were set
  aside (`relaxed`); and the time: the fastest of `rounds` turns of each and their ratio, the ratio of the medians,
  and every turn's time.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from statistics import median

from sacrebleu.metrics import BLEU, CHRF

from transformer.config import load_config
from transformer.data.corpus import load_pairs, read_lines
from transformer.decoding.glossary import Glossary
from transformer.errors import UserError


def _holds(text: str, term: str, *, any_case: bool) -> bool:
    return re.search(rf"(?<!\w){re.escape(term)}(?!\w)", text, re.IGNORECASE if any_case else 0) is not None


def term_shares(texts: Sequence[str], wanted: Sequence[Sequence[str]]) -> dict:
    """The share of (line, target term) pairs whose term `texts[line]` holds: as written, and in any case."""
    pairs = [(text, term) for text, terms in zip(texts, wanted) for term in terms]
    if not pairs:
        return {"exact": None, "any_case": None}
    exact = sum(_holds(text, term, any_case=False) for text, term in pairs)
    loose = sum(_holds(text, term, any_case=True) for text, term in pairs)
    return {"exact": round(exact / len(pairs), 4), "any_case": round(loose / len(pairs), 4)}


def _scores(hypotheses: Sequence[str], references: Sequence[str], lines: Sequence[int]) -> dict:
    if not lines:
        return {"lines": 0, "chrf": None, "bleu": None}
    hyps, refs = [hypotheses[i] for i in lines], [[references[i] for i in lines]]
    chrf, bleu = CHRF().corpus_score(hyps, refs).score, BLEU().corpus_score(hyps, refs).score
    return {"lines": len(lines), "chrf": round(chrf, 2), "bleu": round(bleu, 2)}


def timed(translator, sources: Sequence[str], glossary: Glossary) -> tuple[list, float]:
    """(the best Translation of each line, seconds) of one translate call with `glossary` (empty: none)."""
    start = time.perf_counter()
    results = [hyps[0] for hyps in translator.translate(list(sources), nbest=1, glossary=glossary)]
    return results, time.perf_counter() - start


def compare(translator, glossary: Glossary, sources: Sequence[str], references: Sequence[str], *, rounds: int = 2):
    """The module docstring's measures, after a warm-up, `rounds` turns of each (translator: the Python API's)."""
    timed(translator, sources[:8], Glossary())  # warm-up: the first call pays one-off costs
    runs = {"without": Glossary(), "with": glossary}
    results, seconds = {}, {name: [] for name in runs}
    for _ in range(rounds):
        for name, used in runs.items():
            results[name], spent = timed(translator, sources, used)
            seconds[name].append(spent)
    wanted = [glossary.targets(source) for source in sources]
    with_terms = [i for i, terms in enumerate(wanted) if terms]
    without_terms = [i for i, terms in enumerate(wanted) if not terms]
    texts = {name: [t.text for t in found] for name, found in results.items()}
    fastest = {name: min(times) for name, times in seconds.items()}
    return {
        "lines": len(sources),
        "glossary_terms": len(glossary),
        "lines_with_terms": len(with_terms),
        "term_pairs": sum(len(terms) for terms in wanted),
        "terms_in_output": {name: term_shares(texts[name], wanted) for name in runs},
        "terms_in_reference": term_shares(references, wanted),
        "relaxed_lines": sum("constraints" in t.relaxed for t in results["with"]),
        "lines_without_terms": {
            **{name: _scores(texts[name], references, without_terms) for name in runs},
            "outputs_changed": sum(texts["with"][i] != texts["without"][i] for i in without_terms),
        },
        "lines_with_terms_scores": {name: _scores(texts[name], references, with_terms) for name in runs},
        "all_lines": {name: _scores(texts[name], references, range(len(sources))) for name in runs},
        "seconds": {name: round(value, 3) for name, value in fastest.items()},
        "rounds": {name: [round(value, 3) for value in times] for name, times in seconds.items()},
        "time_ratio": round(fastest["with"] / max(fastest["without"], 1e-9), 3),
        "time_ratio_median": round(median(seconds["with"]) / max(median(seconds["without"]), 1e-9), 3),
    }


def parallel_set(src: str | None, ref: str | None, config: str | None, split: str, *, stride: int = 1, lines: int = 0):
    """(sources, references) of a parallel test set: the files `src` and `ref`, or the `split` (test, valid) of the
    config `config`; every `stride`-th pair, the first `lines` of them (0: all)."""
    if (src is None) != (ref is None) or (src is None) == (config is None):
        raise UserError("give the test set as --src FILE --ref FILE, or as --config FILE [--split test|valid]")
    if config is not None:
        data = load_config(config).data
        sources, references = load_pairs(getattr(data, split), data)
    else:
        sources, references = read_lines(src), read_lines(ref)
        if len(sources) != len(references):
            raise UserError(f"{src} has {len(sources)} lines and {ref} {len(references)}: give line-aligned files")
    sources, references = sources[::stride], references[::stride]
    return (sources[:lines], references[:lines]) if lines else (sources, references)
