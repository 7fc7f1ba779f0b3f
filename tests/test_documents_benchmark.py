"""transformer/benchmarks/documents.py: the HTML tag check against translations whose right answer is known."""

from __future__ import annotations

import random

import pytest
from document_samples import Identity

pytest.importorskip("sentencex")

from transformer.benchmarks import documents as bench  # noqa: E402
from transformer.documents import translate_document  # noqa: E402

VERSES = [
    "Y dijo Dios: Sea la luz. Y fue la luz.",
    "Y vio Dios que la luz era buena, y separó Dios la luz de las tinieblas.",
    "Y llamó Dios a la luz Día, y a las tinieblas llamó Noche.",
    "Y fue la tarde y la mañana un día.",
    "Luego dijo Dios: Haya expansión en medio de las aguas.",
]


class Recorded(Identity):
    """The identity, keeping (sentence, translation, alignment) as the benchmark's Recorder does."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = []

    def translate(self, sentences):
        found = super().translate(sentences)
        self.calls += [(s, text, links) for s, (text, links) in zip(sentences, found)]
        return found


def _wrapped() -> bench.Wrapped:
    rng = random.Random(3)
    return bench.wrap_html(VERSES, bench.paragraphs(len(VERSES), rng), rng)


def test_every_tag_of_an_identity_translation_is_exact_and_so_is_every_guess():
    """Word i aligned to word i: the document comes back as it was, every tag around its own words; with a tag's
    links hidden, its neighbours' links put it back on them."""
    wrapped, recorded = _wrapped(), Recorded()
    output = translate_document(wrapped.document, "html", recorded)
    record = bench.tag_agreement(wrapped, output, recorded.calls)
    assert output == wrapped.document and record["tags"] > 3
    assert record["checked"] == record["exact"] == record["guess_exact"] == record["tags"]


def test_tags_moved_off_their_aligned_words_are_not_counted_exact():
    """The same words, each aligned one word further on: no tag stands on its aligned words (the check can fail)."""
    wrapped, recorded = _wrapped(), Recorded()
    output = translate_document(wrapped.document, "html", recorded)
    shifted = [(s, t, [(i, min(len(t.split()) - 1, j + 1)) for i, j in a]) for s, t, a in recorded.calls]
    record = bench.tag_agreement(wrapped, output, shifted)
    assert record["checked"] == record["tags"] and record["exact"] < record["tags"] // 2
