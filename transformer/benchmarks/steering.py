"""Steered decoding measured on a test set (scripts/benchmark_steering.py): lexical constraints taken from the
reference (its rarest one or two words, by their frequency in the training targets, as Post & Vilar 2018 and Hu
et al. 2019 evaluate), and n-gram blocking; BLEU, constraint satisfaction and decoding time against plain beam
search, with the same model, settings and batches. The table of docs/decoding.md comes from here.
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


def compare(translator, sources, references, constraints, *, no_repeat: int = 3) -> dict:
    """Plain beam search vs constrained vs n-gram blocked on the same lines: BLEU, satisfaction, seconds."""
    from dataclasses import replace

    plain, plain_s = timed(translator, sources)
    steered, steered_s = timed(translator, sources, constraints=constraints)
    translator.settings = replace(translator.settings, no_repeat_ngram_size=no_repeat)
    blocked, blocked_s = timed(translator, sources)
    translator.settings = replace(translator.settings, no_repeat_ngram_size=0)
    bleu = BLEU()
    score = lambda results: round(bleu.corpus_score([r.text for r in results], [list(references)]).score, 2)
    tok = translator.tokenizer
    repeats = sum(_repeats(r.tokens, no_repeat) for r in blocked)
    return {
        "lines": len(sources), "constraints": sum(len(c) for c in constraints),
        "bleu": {"plain": score(plain), "constrained": score(steered), f"no_repeat_{no_repeat}": score(blocked)},
        "met": {name: sum(met(tok, r.tokens, c) for r, c in zip(results, constraints))
                for name, results in (("plain", plain), ("constrained", steered))},
        "seconds": {"plain": round(plain_s, 1), "constrained": round(steered_s, 1), "no_repeat": round(blocked_s, 1)},
        "repeated_ngrams_with_blocking": repeats,
        "repeated_ngrams_plain": sum(_repeats(r.tokens, no_repeat) for r in plain),
    }  # fmt: skip


def _repeats(tokens: list[int], n: int) -> int:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) - len(set(grams))
