"""Documents, not lines: whole files translated with their markup kept (`transformer-translate --format`).

A format is an adapter in three parts: parse into segments (text to translate, markup kept), hand the segments to
the translator, rebuild from the translations and their word alignments. The translator knows no format, and this
package knows no model: it asks a `SentenceTranslator` (sentences in, translations and alignments out; api.py's
`SentenceAdapter`) for its sentences, all of a document's at once. segments (the model), layout, sentences,
rendering and placement (markup placed by alignment), pipeline (the hand-off), formats (by name) and one adapter
per format: plain, html_doc (with html_markup), markdown_doc (with markdown_inline), subtitles (srt, vtt), word
(docx). Imports only the shared modules (errors, fileio); the format packages (the `documents` extra) are loaded
when a format is used.
"""

from __future__ import annotations

from transformer.documents.formats import FORMATS, guess_format, read_document, require
from transformer.documents.segments import SentenceTranslator


def translate_document(
    data: str | bytes,
    format: str,
    translator: SentenceTranslator,
    *,
    language: str = "en",
    attributes: bool = False,
    name: str = "the document",
) -> str | bytes:
    """`data` (str or UTF-8 bytes; bytes for docx) translated as a `format` document, returned as the same type.

    language: the source language, for the sentence splitter; attributes: html's alt and title translated too;
    name: how errors name the document."""
    from transformer.documents.pipeline import translate_segments

    parsed = read_document(data, format, name=name, attributes=attributes)
    return parsed.rebuild(translate_segments(parsed.segments(), translator, language))


__all__ = ["FORMATS", "SentenceTranslator", "guess_format", "read_document", "require", "translate_document"]
