"""Documents, not lines: whole files translated with their markup kept (`transformer-translate --format`).

A format is an adapter in three parts: parse into segments (text to translate, markup kept), hand the segments to
the translator, rebuild from the translations and their word alignments. The translator knows no format, and this
package knows no model: it asks a `SentenceTranslator` (sentences in, translations and alignments out; api.py's
`SentenceAdapter`) for its sentences, all of a document's at once (`translate_document`), or hands them to a
caller that decodes them itself (`prepare_document`, then its `rebuild`). segments (the model), layout, sentences,
rendering and placement (markup placed by alignment), pipeline (the hand-off), formats (by name) and one adapter
per format: plain, html_doc (with html_markup), markdown_doc (with markdown_inline), subtitles (srt, vtt), word
(docx), gettext (po), xliff (with xliff_inline). spans and protection: what must not change (placeholders, URLs,
code, numbers, ...) masked from the model and placed back as markup, in documents and in lines (lines.py).
Imports only the shared modules (errors, fileio); the format packages (the `documents` extra) are loaded when a
format is used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from transformer.documents.formats import FORMATS, Parsed, guess_format, read_document, require
from transformer.documents.segments import Alignment, SentenceTranslator
from transformer.documents.spans import PROTECT, Protection

if TYPE_CHECKING:
    from transformer.documents.pipeline import Planned


class PreparedDocument:
    """A document parsed and cut into sentences: `sentences` to translate, then `rebuild(results)` with one
    (translation, alignment or None) per sentence, as `SentenceTranslator.translate` answers. `translate_document`
    in two steps, for a caller that decodes the sentences itself (transformer-serve, in its batcher's rounds)."""

    def __init__(self, parsed: Parsed, planned: Planned) -> None:
        self.parsed, self.planned = parsed, planned
        self.sentences = planned.sentences

    def rebuild(self, results: Sequence[tuple[str, Alignment | None]]) -> str | bytes:
        """The translated document (the input's type: str, or bytes)."""
        from transformer.documents.pipeline import place_translations

        return self.parsed.rebuild(place_translations(self.planned, results))


def prepare_document(
    data: str | bytes,
    format: str,
    fits: Callable[[str], bool],
    *,
    language: str = "en",
    attributes: bool = False,
    name: str = "the document",
    max_unpacked: int | None = None,
    protection: Protection = PROTECT,
    retranslate: bool = False,
) -> PreparedDocument:
    """`data` (str or UTF-8 bytes; bytes for docx) parsed as a `format` document and cut into sentences that each
    `fits` the model; a one-line `UserError` for a document that is not of its format. language, attributes, name,
    protection, retranslate: as `translate_document`'s; max_unpacked: as `read_document`'s."""
    from transformer.documents.pipeline import plan_segments

    parsed = read_document(
        data, format, name=name, attributes=attributes, max_unpacked=max_unpacked, retranslate=retranslate
    )
    return PreparedDocument(parsed, plan_segments(parsed.segments(), fits, language, protection))


def translate_document(
    data: str | bytes,
    format: str,
    translator: SentenceTranslator,
    *,
    language: str = "en",
    attributes: bool = False,
    name: str = "the document",
    protection: Protection = PROTECT,
    retranslate: bool = False,
) -> str | bytes:
    """`data` (str or UTF-8 bytes; bytes for docx, po and xliff) translated as a `format` document, returned as
    the same type.

    language: the source language, for the sentence splitter; attributes: html's alt and title translated too;
    name: how errors name the document; protection: what is kept as written (spans.py; on by default);
    retranslate: po and xliff entries already translated are translated again (else left alone)."""
    options = dict(language=language, attributes=attributes, name=name, protection=protection, retranslate=retranslate)
    prepared = prepare_document(data, format, translator.fits, **options)
    sentences = prepared.sentences
    return prepared.rebuild(translator.translate(sentences) if sentences else [])


__all__ = [
    "FORMATS",
    "PreparedDocument",
    "Protection",
    "SentenceTranslator",
    "guess_format",
    "prepare_document",
    "read_document",
    "require",
    "translate_document",
]
