"""Segments to the translator and back: every sentence of a document in one call, markup placed on the results.

Each segment is laid out (layout.py), its words cut into sentences that fit the model (sentences.py); every
sentence of every segment goes to `SentenceTranslator.translate` at once (the translator sorts them into batches by
length), each as its words joined by single spaces; the translations and their word alignments come back to their
segments, whose markup is placed on them (placement.py). A segment with no word (only spaces, only markup) is
written as it was. Nothing is dropped: a translator that answers with another number of translations is an error.
The two halves, `plan_segments` (the sentences) and `place_translations` (their results placed), also stand apart
for a caller that decodes the sentences itself (transformer-serve, in its batcher's rounds).
Protected spans (placeholders, URLs, code, numbers, ...: protection.py) become atoms before a segment is laid out,
so the model never reads them and each is placed back once, as markup is; a segment left with no word that holds a
letter is written as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from transformer.documents.layout import Layout
from transformer.documents.placement import place
from transformer.documents.protection import drop_invented, nothing_to_translate, protect_segment, protected_atoms
from transformer.documents.segments import Alignment, Piece, Segment, SentenceTranslator, check_pairs
from transformer.documents.sentences import sentence_ranges, soft_end
from transformer.documents.spans import PROTECT, Protection

log = logging.getLogger(__name__)


def plan(segment: Segment, fits: Callable[[str], bool], language: str) -> tuple[Layout, list[tuple[int, int]]]:
    """A segment's layout and the word ranges of the sentences it is translated in (each one that `fits`)."""
    check_pairs(segment.pieces)
    layout = Layout(segment)
    texts = layout.texts
    if nothing_to_translate(layout):
        return layout, []

    def safe(k: int) -> int:
        return 2 if layout.breaks_line(k) else int(soft_end(texts[k - 1]))

    return layout, sentence_ranges(texts, language, fits, safe)


@dataclass
class Planned:
    """Segments cut into the sentences they are translated in: `sentences` to a translator, its results to
    `place_translations`. A caller that decodes the sentences itself (the server, in its own batches) holds this
    between the two steps."""

    segments: Sequence[Segment]
    plans: list[tuple[Layout, list[tuple[int, int]]]]  # each segment's layout and its sentences' word ranges

    @property
    def sentences(self) -> list[str]:
        """Every sentence of every segment, in order, each its words joined by single spaces."""
        return [" ".join(layout.texts[a:b]) for layout, ranges in self.plans for a, b in ranges]


def plan_segments(
    segments: Sequence[Segment],
    fits: Callable[[str], bool],
    language: str = "en",
    protection: Protection = PROTECT,
) -> Planned:
    """`segments` cut into sentences, each one that `fits` the model (SentenceTranslator.fits), their protected
    spans (`protection`) made atoms first."""
    segments = [protect_segment(segment, protection) for segment in segments]
    return Planned(segments, [plan(segment, fits, language) for segment in segments])


def place_translations(planned: Planned, results: Sequence[tuple[str, Alignment | None]]) -> list[list[Piece]]:
    """The target pieces of each segment from its sentences' (translation, alignment), in order."""
    if len(results) != sum(len(ranges) for _, ranges in planned.plans):
        raise RuntimeError(
            f"the translator answered {len(results)} translations for {len(planned.sentences)} sentences"
        )
    outputs, done = [], 0
    for segment, (layout, ranges) in zip(planned.segments, planned.plans):
        if not ranges:
            outputs.append(list(segment.pieces))
            continue
        placer = segment.info.get("place", place)  # an adapter may place its markup otherwise (word.py)
        spans = {atom.raw for atom in protected_atoms(segment)}
        own = [drop_invented(text, links, spans) for text, links in results[done : done + len(ranges)]]
        pieces = placer(layout, ranges, own)
        finish = segment.info.get("finish")  # and go over the placed pieces last (markdown_emphasis.py)
        outputs.append(finish(segment.pieces, pieces) if finish else pieces)
        done += len(ranges)
    return outputs


def translate_segments(
    segments: Sequence[Segment],
    translator: SentenceTranslator,
    language: str = "en",
    protection: Protection = PROTECT,
) -> list[list[Piece]]:
    """The target pieces of each segment, in order (see the module docstring)."""
    planned = plan_segments(segments, translator.fits, language, protection)
    sentences = planned.sentences
    log.info("%d segments, %d sentences to translate", len(segments), len(sentences))
    return place_translations(planned, translator.translate(sentences) if sentences else [])


def sentence_count(
    segments: Sequence[Segment],
    translator: SentenceTranslator,
    language: str = "en",
    protection: Protection = PROTECT,
) -> int:
    """How many sentences `translate_segments` would send (for progress and tests)."""
    protected = (protect_segment(segment, protection) for segment in segments)
    return sum(len(plan(segment, translator.fits, language)[1]) for segment in protected)
