"""Language detection (transformer/serving/detection.py, py3langid) on held-out lines of the bundled corpus (its test
books: Spanish and English verses no model here was trained on), and the benchmark's held-out sets and measure
(transformer/benchmarks/detection.py) on a scripted scorer."""

from __future__ import annotations

import lzma
from pathlib import Path

import pytest

pytest.importorskip("py3langid")

from transformer.benchmarks.detection import KINDS, SHORT_WORDS, held_out, measure, restricted  # noqa: E402
from transformer.serving.detection import DETECT_CHARS, LanguageDetector  # noqa: E402

TEST_BOOKS = Path(__file__).resolve().parents[1] / "data" / "bible-es-en" / "test.tsv.xz"


@pytest.fixture(scope="module")
def lines() -> dict[str, list[str]]:
    with lzma.open(TEST_BOOKS, "rt", encoding="utf-8") as rows:
        columns = [row.rstrip("\n").split("\t") for row in rows]
    return {"es": [c[1] for c in columns], "en": [c[2] for c in columns]}


@pytest.fixture(scope="module")
def detector() -> LanguageDetector:
    return LanguageDetector(["es", "en"])


def test_ordinary_held_out_lines_are_detected_at_least_95_percent_of_the_time(lines, detector):
    sets = held_out(lines, 200, seed=3)
    for language, texts in sets["ordinary"].items():
        right = sum(detector.detect(text)[0][0] == language for text in texts)
        assert right / len(texts) >= 0.95, (language, right)
        assert not any(detector.foreign(detector.detect(text)) for text in texts)  # never taken for another language


def test_the_answer_is_the_served_languages_best_first_with_probabilities_in_percent(detector):
    ranked = detector.detect("Y dijo Dios: Sea la luz, y fué la luz.")
    assert [code for code, _ in ranked] == ["es", "en"] and ranked[0][1] > 50 > ranked[1][1] >= 0
    assert sum(confidence for _, confidence in ranked) <= 100.0 + 1e-6


@pytest.mark.parametrize("text", ["", "   ", "123 456", "!!! ... ???", "3:16 -- 42%"])
def test_text_with_no_letter_has_no_language(detector, text):
    assert detector.detect(text) == []


def test_german_is_foreign_to_a_spanish_and_english_server(detector):
    text = "Das ukrainische Parlament verweigerte heute den Antrag, den Paragrafen abzuschaffen."
    assert detector.foreign(detector.detect(text))


def test_only_the_first_characters_are_read(detector, monkeypatch):
    seen = []

    class Counting:
        def rank(self, text):
            seen.append(len(text))
            return [("es", 1.0), ("en", 0.0)]

    monkeypatch.setattr(detector, "identifier", Counting())
    detector.detect("hola " * 1_000_000)
    assert seen == [DETECT_CHARS]


def test_languages_the_identifier_does_not_know_are_never_detected():
    detector = LanguageDetector(["es", "xx"])
    assert detector.known == ("es",) and [code for code, _ in detector.detect("hola amigo")] == ["es"]
    assert LanguageDetector(["xx", "yy"]).detect("hola amigo") == []


def test_held_out_sets_have_each_kind_and_length(lines):
    sets = held_out(lines, 50, seed=1)
    assert set(sets) == set(KINDS)
    for language in ("es", "en"):
        assert len(sets["ordinary"][language]) == 50
        lengths = [len(text.split()) for text in sets["short"][language]]
        assert sorted(set(lengths)) == list(SHORT_WORDS) and lengths.count(1) == 10
        assert all(3 <= len(text.split()) <= 6 for text in sets["names_numbers"][language])
        for text in sets["names_numbers"][language]:  # a word that starts with a capital, or a digit
            starts = [next((c for c in word if c.isalnum()), "") for word in text.split()]
            assert any(c.isupper() for c in starts) or any(c.isdigit() for c in text), text


def test_measure_counts_restricted_and_open_answers():
    sets = {"ordinary": {"es": ["uno", "dos"], "en": ["one", "two"]}}
    answers = {"uno": [("pt", 0.6), ("es", 0.4)], "dos": [("es", 0.9)], "one": [("en", 1.0)], "two": [("de", 1.0)]}
    result = measure(lambda text: answers[text], sets, ["es", "en"])
    assert result["restricted"]["ordinary"] == {"es": 1.0, "en": 0.5}  # "two": no served language named
    assert result["open"]["ordinary"] == {"es": 0.5, "en": 0.5}
    assert restricted([("pt", 0.6), ("es", 0.4)], ["es", "en"]) == "es"
