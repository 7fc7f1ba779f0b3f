"""Input in any case, measured (scripts/benchmark_case.py): a checkpoint on a test set as written, in ALL CAPS and
in Title Case, and on single words and short fragments of the test set's source side in the same three casings.

- Casings: `data/case_augmentation.py`'s (str.upper and `title_case`), applied to both sides alike, so a casing's
  output is scored against its reference cased the same way (sacreBLEU's chrF and BLEU, case-sensitive); ALL CAPS
  with and without `decode.fold_capitals` (decoding/casing.py).
- Fragments (`fragments`): `count` single words and `count` runs of 2-3 consecutive words, drawn with `seed` from
  the source lines (words: runs of letters, digits and apostrophes; punctuation left out).
- Per output: a loop (`has_loop`: a piece n-gram three times in a row, any n), too long (more than
  `2 * words + 2` words for a fragment of `words` words: a sentence, not a word), empty.
- The run limit's cost (`time_run_limit`): the test set as written, with `decode.max_ngram_repeats` 0 and as set,
  taking turns, the fastest of `rounds` each.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

from transformer.data.case_augmentation import title_case

CASINGS: dict[str, Callable[[str], str]] = {"as_written": lambda text: text, "upper": str.upper, "title": title_case}
_WORD = re.compile(r"[\w'’]+")


def has_loop(tokens: Sequence[int], repeats: int = 3) -> bool:
    """Whether some n-gram of `tokens` occurs `repeats` times in a row ("A A A", "ab ab ab"), any n >= 1."""
    tokens = list(tokens)
    for n in range(1, len(tokens) // repeats + 1):
        for start in range(len(tokens) - repeats * n + 1):
            gram = tokens[start : start + n]
            if all(tokens[start + k * n : start + (k + 1) * n] == gram for k in range(1, repeats)):
                return True
    return False


def too_long(source: str, output: str) -> bool:
    """Whether `output` has more than 2 words a word of `source`, plus 2: a sentence made up around a fragment."""
    return len(output.split()) > 2 * len(source.split()) + 2


def fragments(lines: Sequence[str], count: int, seed: int) -> dict[str, list[str]]:
    """{"words": `count` single words, "fragments": `count` runs of 2-3 words}, drawn from `lines` with `seed`
    (a line, then a place in it; a line too short for the run is drawn again), in the casing of the text."""
    rng, split = np.random.default_rng(seed), [_WORD.findall(line) for line in lines]
    out: dict[str, list[str]] = {"words": [], "fragments": []}
    for kind, sizes in (("words", (1,)), ("fragments", (2, 3))):
        while len(out[kind]) < count:
            words, size = split[int(rng.integers(len(split)))], int(rng.choice(sizes))
            if len(words) >= size:
                start = int(rng.integers(len(words) - size + 1))
                out[kind].append(" ".join(words[start : start + size]))
    return out


def _translate(translator, sources: Sequence[str]) -> tuple[list, float]:
    start = time.perf_counter()
    best = [hyps[0] for hyps in translator.translate(list(sources), nbest=1)]
    return best, time.perf_counter() - start


def _examples(sources, best, picked: Callable[[int], bool], limit: int = 5) -> list[list[str]]:
    return [[sources[i], best[i].text] for i in range(len(sources)) if picked(i)][:limit]


def fragment_report(translator, sources: Sequence[str]) -> dict:
    """Loops, too long and empty outputs among `sources`' translations, with up to 5 examples of each."""
    best, seconds = _translate(translator, sources)
    loops = [has_loop(hyp.tokens) for hyp in best]
    long = [too_long(src, hyp.text) for src, hyp in zip(sources, best)]
    ratio = [len(hyp.text.split()) / max(len(src.split()), 1) for src, hyp in zip(sources, best)]
    return {
        "inputs": len(sources),
        "loops": sum(loops),
        "too_long": sum(long),
        "empty": sum(not hyp.text.strip() for hyp in best),
        "mean_words_per_source_word": round(float(np.mean(ratio)), 3),
        "seconds": round(seconds, 2),
        "loop_examples": _examples(sources, best, lambda i: loops[i]),
        "too_long_examples": _examples(sources, best, lambda i: long[i] and not loops[i]),
        "examples": _examples(sources, best, lambda i: True, 8),
    }


TEST_SET_CASINGS = (*CASINGS, "upper_not_folded")


def test_set_report(
    translator, sources: Sequence[str], references: Sequence[str], casings: Sequence[str] = TEST_SET_CASINGS
) -> dict:
    """Per casing of `casings`: chrF and BLEU against the reference cased alike, outputs with a loop, seconds; ALL
    CAPS also without `decode.fold_capitals` ("upper_not_folded", when it is on)."""
    runs = [(name, CASINGS[name], translator) for name in CASINGS if name in casings]
    if translator.config.decode.fold_capitals and "upper_not_folded" in casings:
        runs.append(("upper_not_folded", str.upper, translator.with_decode(fold_capitals=False)))
    report = {}
    for name, casing, used in runs:
        cased = [casing(line) for line in sources]
        best, seconds = _translate(used, cased)
        hyps, refs = [hyp.text for hyp in best], [[casing(line) for line in references]]
        loops = [has_loop(hyp.tokens) for hyp in best]
        report[name] = {
            "chrf": round(CHRF().corpus_score(hyps, refs).score, 2),
            "bleu": round(BLEU().corpus_score(hyps, refs).score, 2),
            "loops": sum(loops),
            "seconds": round(seconds, 1),
            "loop_examples": [[cased[i], hyps[i]] for i in range(len(cased)) if loops[i]][:3],
        }
    return report


def fragments_by_casing(translator, lines: Sequence[str], count: int, seed: int) -> dict:
    """`fragment_report` of `fragments(lines, count, seed)`, each kind in each casing."""
    drawn = fragments(lines, count, seed)
    return {
        f"{kind}_{name}": fragment_report(translator, [casing(text) for text in texts])
        for kind, texts in drawn.items()
        for name, casing in CASINGS.items()
    }


def time_run_limit(translator, sources: Sequence[str], rounds: int) -> dict:
    """Seconds (the fastest of `rounds`) to translate `sources` without the run limit and with the translator's."""
    runs = {"without": translator.with_decode(max_ngram_repeats=0), "with": translator}
    _translate(translator, sources[:8])  # warm-up
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, used in runs.items():
            seconds[name].append(_translate(used, sources)[1])
    fastest = {name: round(min(times), 2) for name, times in seconds.items()}
    return {"rounds": rounds, "seconds": fastest, "ratio": round(fastest["with"] / fastest["without"], 3)}
