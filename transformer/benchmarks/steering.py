"""Steered decoding measured on a test set (scripts/benchmark_steering.py): lexical constraints taken from the
reference (its rarest one or two words, by their frequency in the training targets, as Post & Vilar 2018 and Hu
et al. 2019 evaluate), the reference's first two words as a prefix, and n-gram blocking; BLEU, constraint
satisfaction and decoding time against plain beam search, with the same model, settings and batches. The table of
docs/decoding.md comes from here.
"""

from __future__ import annotations

import collections
import re
import time
from collections.abc import Sequence

from sacrebleu.metrics import BLEU

WORD = re.compile(r"[^\W\d_]+")  # a word for the constraints: letters only


def rarest_words(references: Sequence[str], counts: collections.Counter, most: int = 2) -> list[list[str]]:
    """Per reference, its `most` rarest distinct words (fewest occurrences in `counts`, lowercased; ties by the
    order in the sentence), as they are written in the reference, in the order they appear there."""
    picked = []
    for reference in references:
        words = list(dict.fromkeys(WORD.findall(reference)))
        rarest = sorted(words, key=lambda w: (counts[w.lower()], words.index(w)))[:most]
        picked.append([w for w in words if w in rarest])
    return picked


def word_counts(texts: Sequence[str]) -> collections.Counter:
    counts = collections.Counter()
    for text in texts:
        counts.update(w.lower() for w in WORD.findall(text))
    return counts


def met(tokenizer, tokens: list[int], phrases: Sequence[str]) -> bool:
    """Whether `tokens` hold every phrase's pieces (as the search enforces them)."""
    pieces = tokenizer.encode_tgt(list(phrases)) if phrases else []
    return all(any(tokens[i : i + len(p)] == p for i in range(len(tokens) - len(p) + 1)) for p in pieces)


def timed(translator, sources: Sequence[str], **steer) -> tuple[list, float]:
    """(best Translation per line, seconds) of one translate call."""
    start = time.perf_counter()
    results = [r[0] for r in translator.translate(list(sources), **steer)]
    return results, time.perf_counter() - start


def compare(translator, sources, references, constraints, *, no_repeat: int = 3, rounds: int = 2) -> dict:
    """Plain beam search, constrained, with reference prefixes (the first two words) and n-gram blocked, on the same
    lines after a warm-up, taking turns `rounds` times: BLEU, constraints met, prefixes kept, the fastest time."""
    from dataclasses import replace

    prefixes = [" ".join(r.split()[:2]) for r in references]
    runs = {"plain": {}, "constrained": {"constraints": constraints}, "prefix": {"prefix": prefixes}, "no_repeat": {}}
    timed(translator, sources[:8])  # warm-up: the first call pays one-off costs
    results, seconds = {}, {name: [] for name in runs}
    for _ in range(rounds):
        for name, steer in runs.items():
            translator.settings = replace(translator.settings, no_repeat_ngram_size=no_repeat * (name == "no_repeat"))
            results[name], elapsed = timed(translator, sources, **steer)
            seconds[name].append(round(elapsed, 2))
    translator.settings = replace(translator.settings, no_repeat_ngram_size=0)
    bleu, tok = BLEU(), translator.tokenizer
    pieces = tok.encode_tgt(prefixes)
    return {
        "lines": len(sources),
        "constraints": sum(len(c) for c in constraints),
        "seconds": seconds,
        "bleu": {
            name: round(bleu.corpus_score([r.text for r in out], [list(references)]).score, 2)
            for name, out in results.items()
        },
        "constraints_met": {
            name: sum(met(tok, r.tokens, c) for r, c in zip(results[name], constraints))
            for name in ("plain", "constrained")
        },
        "prefix_kept": sum(r.tokens[: len(p)] == p for r, p in zip(results["prefix"], pieces)),
        "repeated_ngrams": {
            name: sum(_repeats(r.tokens, no_repeat) for r in results[name]) for name in ("plain", "no_repeat")
        },
    }


def _repeats(tokens: list[int], n: int) -> int:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) - len(set(grams))
