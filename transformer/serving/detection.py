"""Language identification for `source: auto` and POST /detect: py3langid (the `serve` extra; its model, 97
languages, ships inside the wheel: nothing is downloaded), chosen by measuring candidates on held-out lines
(docs/serving.md, "Detecting the language"; transformer/benchmarks/detection.py).

- `detect(text)`: the server's source languages that the identifier knows, best first, each with its probability
  over all 97 languages in percent (LibreTranslate's `confidence`): ranking only among the served languages keeps
  a short line from straying to a language no model serves, and the open probability keeps the confidence honest
  (German text on a Spanish and English server gets both near 0). Text with no letter (digits, punctuation,
  nothing) has no language: [].
- `foreign(ranked)`: the served languages together hold less than FOREIGN_BELOW of the probability: the text is in
  another language (measured: no held-out Spanish or English line, short ones included, is taken for foreign;
  96% of ordinary German lines are).
- Work is bounded: only the first DETECT_CHARS characters are read, whatever a request holds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

DETECT_CHARS = 2000  # characters of a text the identifier reads (its answer settles long before)
FOREIGN_BELOW = 0.1  # percent: served languages holding less than this, together, make a text foreign
_LOCK = threading.Lock()
_IDENTIFIER = None  # py3langid's identifier over all its languages, loaded once per process


def has_letters(text: str) -> bool:
    """Whether `text` holds a letter of any script (a language can be told from it)."""
    return any(ch.isalpha() for ch in text)


def _identifier():
    global _IDENTIFIER
    with _LOCK:
        if _IDENTIFIER is None:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            _IDENTIFIER = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        return _IDENTIFIER


class LanguageDetector:
    """The language of a text among `languages` (ISO 639-1 codes; those the identifier does not know are never
    detected)."""

    def __init__(self, languages: Iterable[str]) -> None:
        self.identifier = _identifier()
        known = set(self.identifier.nb_classes)
        self.languages = tuple(sorted(set(languages)))
        self.known = tuple(code for code in self.languages if code in known)

    def detect(self, text: str, among: list[str] | None = None) -> list[tuple[str, float]]:
        """[(code, confidence in percent), ...] of the known served languages (those of `among`, if given), best
        first; [] for text with no letter."""
        text = text[:DETECT_CHARS]
        codes = [code for code in self.known if among is None or code in among]
        if not codes or not has_letters(text):
            return []
        probabilities = dict(self.identifier.rank(text))
        ranked = sorted(codes, key=lambda code: -probabilities[code])
        return [(code, 100 * float(probabilities[code])) for code in ranked]

    @staticmethod
    def foreign(ranked: list[tuple[str, float]]) -> bool:
        """Whether a `detect` answer says the text is in none of its languages."""
        return sum(confidence for _, confidence in ranked) < FOREIGN_BELOW
