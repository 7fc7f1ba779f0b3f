"""Segments to the translator and back: every sentence of a document in one call, markup placed on the results.

Each segment is laid out (layout.py), its words cut into sentences that fit the model (sentences.py); every
sentence of every segment goes to `SentenceTranslator.translate` at once (the translator sorts them into batches by
length), each as its words joined by single spaces; the translations and their word alignments come back to their
segments, whose markup is placed on them (placement.py). A segment with no word (only spaces, only markup) is
written as it was. Nothing is dropped: a translator that answers with another number of translations is an error.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from transformer.documents.layout import Layout
from transformer.documents.placement import place
from transformer.documents.segments import Piece, Segment, SentenceTranslator, check_pairs
from transformer.documents.sentences import sentence_ranges, soft_end

log = logging.getLogger(__name__)


def plan(segment: Segment, translator: SentenceTranslator, language: str) -> tuple[Layout, list[tuple[int, int]]]:
    """A segment's layout and the word ranges of the sentences it is translated in."""
    check_pairs(segment.pieces)
    layout = Layout(segment)
    texts = layout.texts

    def safe(k: int) -> int:
        return 2 if layout.breaks_line(k) else int(soft_end(texts[k - 1]))

    return layout, sentence_ranges(texts, language, translator.fits, safe)


def translate_segments(
    segments: Sequence[Segment], translator: SentenceTranslator, language: str = "en"
) -> list[list[Piece]]:
    """The target pieces of each segment, in order (see the module docstring)."""
    plans = [plan(segment, translator, language) for segment in segments]
    sentences = [" ".join(layout.texts[a:b]) for layout, ranges in plans for a, b in ranges]
    log.info("%d segments, %d sentences to translate", len(segments), len(sentences))
    results = translator.translate(sentences) if sentences else []
    if len(results) != len(sentences):
        raise RuntimeError(f"the translator answered {len(results)} translations for {len(sentences)} sentences")
    outputs, done = [], 0
    for segment, (layout, ranges) in zip(segments, plans):
        if not ranges:
            outputs.append(list(segment.pieces))
            continue
        placer = segment.info.get("place", place)  # an adapter may place its markup otherwise (word.py)
        outputs.append(placer(layout, ranges, results[done : done + len(ranges)]))
        done += len(ranges)
    return outputs


def sentence_count(segments: Sequence[Segment], translator: SentenceTranslator, language: str = "en") -> int:
    """How many sentences `translate_segments` would send (for progress and tests)."""
    return sum(len(plan(segment, translator, language)[1]) for segment in segments)
