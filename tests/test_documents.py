"""transformer/documents/: every adapter's identity round trip is byte-exact (the oracle, shown failing on a wrong
rebuild), markup placed by alignment with scripted translators, nothing dropped, long sentences cut to fit."""

from __future__ import annotations

import io
from collections import Counter

import pytest
from document_samples import SAMPLES, TRANSLATION_FILES, Identity, Reverse, Upper, docx_sample, sample

pytest.importorskip("sentencex")
pytest.importorskip("docx")

from transformer.documents import FORMATS, read_document, translate_document  # noqa: E402
from transformer.documents import pipeline as pipeline_module  # noqa: E402
from transformer.documents.layout import Layout  # noqa: E402
from transformer.documents.pipeline import translate_segments  # noqa: E402
from transformer.documents.protection import protect_segment  # noqa: E402
from transformer.documents.segments import Atom, Break, Close, Open, Segment  # noqa: E402
from transformer.documents.sentences import cut_point, sentence_ranges, sentence_starts  # noqa: E402
from transformer.documents.spans import PROTECT  # noqa: E402


@pytest.mark.parametrize("format", sorted(set(FORMATS) - set(TRANSLATION_FILES)))  # theirs: test_po.py, test_xliff.py
@pytest.mark.parametrize("limit", [10**9, 3, 1])  # 3 and 1 words: long sentences cut to fit the "model"
def test_an_identity_translation_gives_the_document_back_byte_for_byte(format, limit):
    data = sample(format)
    assert translate_document(data, format, Identity(limit)) == data
    if format != "docx":  # as UTF-8 bytes too, with a byte-order mark, and with CRLF line endings
        for variant in (data.encode(), b"\xef\xbb\xbf" + data.encode(), data.replace("\n", "\r\n").encode()):
            assert translate_document(variant, format, Identity(limit)) == variant


@pytest.mark.parametrize("format", ["text", "html", "markdown", "srt"])
def test_the_round_trip_oracle_catches_a_wrong_rebuild(format, monkeypatch):
    """A placement that loses one piece of markup, or one that writes the words back single-spaced, fails it."""
    place = pipeline_module.place

    def drops_markup(layout, ranges, translations):
        out = place(layout, ranges, translations)
        markup = [i for i, p in enumerate(out) if isinstance(p, (Open, Atom, Break))]
        return [p for i, p in enumerate(out) if i != (markup or [-1])[0]]

    def single_spaced(layout, ranges, translations):
        return [" ".join(text for text, _ in translations)]

    data = SAMPLES[format]
    for wrong in (drops_markup, single_spaced) if format != "text" else (single_spaced,):
        monkeypatch.setattr(pipeline_module, "place", wrong)
        assert translate_document(data, format, Identity()) != data


def _markup(pieces) -> Counter:
    """Each piece of markup by its identity (a protected span, made anew at each protection, by its text)."""
    return Counter(
        p.raw if isinstance(p, Atom) and p.protected else id(p) for p in pieces if isinstance(p, (Open, Close, Atom))
    )


def _well_formed(pieces, partner: dict) -> bool:
    stack = []
    for piece in pieces:
        if isinstance(piece, Open):
            stack.append(piece)
        elif isinstance(piece, Close) and (not stack or partner[id(stack.pop())] is not piece):
            return False
    return not stack


def _partners(pieces) -> dict:
    stack, partner = [], {}
    for piece in pieces:
        if isinstance(piece, Open):
            stack.append(piece)
        elif isinstance(piece, Close):
            partner[id(stack.pop())] = piece
    return partner


@pytest.mark.parametrize("format", sorted(FORMATS))
@pytest.mark.parametrize("translator", [Reverse, Upper, lambda: Reverse(2)], ids=["reverse", "upper", "reverse-cut"])
def test_markup_is_kept_once_each_and_nests_well_formed(format, translator):
    parsed = read_document(sample(format), format)
    segments = parsed.segments()
    outputs = translate_segments(segments, translator())
    for segment, output in zip([protect_segment(s, PROTECT) for s in segments], outputs):  # spans are atoms
        kept, source = _markup(output), _markup(segment.pieces)
        if format == "docx":  # a Word run comes back once for each stretch of its words (word.py), at least once
            kept, source = set(kept), set(source)
        assert kept == source  # the multiset of tags is kept (cue times: below)
        assert _well_formed(output, _partners(segment.pieces))
    parsed.rebuild(outputs)  # and the document is written


@pytest.mark.parametrize(
    "source, expected",
    [
        ("<p>The <i>red <b>cat</b></i> sat.</p>", "<p>sat. <i><b>cat</b> red</i> The</p>"),
        ('<p>Go <a href="/x">to the</a> park.</p>', '<p>park. <a href="/x">the to</a> Go</p>'),
        ("<p>A <code>x = 1</code> line.</p>", "<p>line. A <code>x = 1</code></p>"),  # code kept, after "A"
        ("<p><b>First.</b> Second one.</p>", "<p><b>First.</b> one. Second</p>"),  # one sentence at a time
        ("<p>One<br>two three.</p>", "<p>three. two One<br></p>"),  # br after the word aligned to "One"
        ("<p>un<b>tr</b>ue words.</p>", "<p>words. un<b>tr</b>ue</p>"),  # inside a word that comes back as it was
        ("<p>A &amp; B.</p>", "<p>B. &amp; A</p>"),
    ],
)
def test_inline_tags_land_around_the_target_words_aligned_to_theirs(source, expected):
    assert translate_document(source, "html", Reverse()) == expected


@pytest.mark.parametrize(
    "source, expected",
    [
        ("Read [the docs](http://x) now.\n", "now. [docs the](http://x) Read\n"),
        ("Some *very **bold** text* here.\n", "here. *text **bold** very* Some\n"),
        ("Run `make test` now.\n", "now. Run `make test`\n"),  # a protected span: after "Run"
        ("> one two\n> three.\n", "> three. two\n> one\n"),  # the break goes after "two", prefix and all
        ("| a b | c |\n|---|---|\n", "| b a | c |\n|---|---|\n"),
    ],
)
def test_markdown_emphasis_links_and_code_spans_are_placed_or_kept(source, expected):
    assert translate_document(source, "markdown", Reverse()) == expected


def test_new_words_are_escaped_for_their_format_and_unchanged_ones_kept_as_written():
    assert translate_document("<p>a &lt;b&gt; &amp; c</p>", "html", Upper()) == "<p>A &lt;B&gt; &amp; C</p>"
    assert translate_document("<p>x &#38; y</p>", "html", Reverse()) == "<p>y &#38; x</p>"  # "&" came back as it was
    assert translate_document("a_b *c*\n", "markdown", Upper()) == "A\\_B *C*\n"


def _timing(text: str) -> list[str]:
    return [line for line in text.split("\n") if "-->" in line or line.strip().isdigit() or line.startswith("WEBVTT")]


@pytest.mark.parametrize("format", ["srt", "vtt"])
@pytest.mark.parametrize("translator", [Reverse, Upper, lambda: Reverse(2)], ids=["reverse", "upper", "reverse-cut"])
def test_subtitle_numbers_and_times_are_identical_and_every_cue_keeps_text(format, translator):
    source = SAMPLES[format]
    out = translate_document(source, format, translator())
    assert _timing(out) == _timing(source)
    cues = [block.split("\n") for block in out.split("\n\n") if "-->" in block]
    assert all(any(line.strip() for line in cue[[i for i, x in enumerate(cue) if "-->" in x][0] + 1 :]) for cue in cues)


def test_a_sentence_over_two_cues_is_translated_whole_and_shared_back():
    source = "1\n00:00:01,000 --> 00:00:02,000\nthe cat sat\n\n2\n00:00:03,000 --> 00:00:04,000\non the mat.\n"
    identity = Identity()
    translate_document(source, "srt", identity)
    assert identity.sent == ["the cat sat on the mat."]
    out = translate_document(source, "srt", Reverse())  # the boundary after "sat" (source word 2) -> target word 3
    assert out == "1\n00:00:01,000 --> 00:00:02,000\nmat. the on sat\n\n2\n00:00:03,000 --> 00:00:04,000\ncat the\n"


def test_cue_tags_stay_within_their_cue():
    source = "1\n00:00:01,000 --> 00:00:02,000\n<i>a b</i> c\n\n2\n00:00:03,000 --> 00:00:04,000\nd e f.\n"
    out = translate_document(source, "srt", Reverse())
    for block in out.split("\n\n"):
        assert block.count("<i>") == block.count("</i>")


@pytest.mark.parametrize("format", sorted(FORMATS))
def test_every_word_of_every_segment_is_sent_once(format):
    identity = Identity(limit=4)
    parsed = read_document(sample(format), format)
    translate_segments(parsed.segments(), identity)
    words = [w for s in parsed.segments() for w in Layout(protect_segment(s, PROTECT)).texts]
    assert [w for sentence in identity.sent for w in sentence.split()] == words
    assert all(0 < len(sentence.split()) <= 4 for sentence in identity.sent)


def test_sentences_follow_the_splitter_and_long_ones_are_cut_at_safe_points():
    words = ["Hello", "there.", "How", "are", "you?", "Fine,", "thanks", "and", "you"]
    assert sentence_starts(words, "en") == [0, 2, 5]
    assert cut_point(0, 6, lambda k: int(k == 2)) == 2  # a soft end near the middle beats the middle
    assert cut_point(0, 6, lambda k: 0) == 3
    ranges = sentence_ranges(words, "en", lambda s: len(s.split()) <= 2, lambda k: 0)
    assert ranges == [(0, 2), (2, 3), (3, 5), (5, 7), (7, 9)]


def test_word_files_keep_run_formatting_by_alignment_and_translate_tables_and_headers():
    import docx

    out = translate_document(docx_sample(), "docx", Upper())
    document = docx.Document(io.BytesIO(out))
    runs = [(run.text, bool(run.bold)) for run in document.paragraphs[0].runs]
    assert runs == [("THE ", False), ("BIG", True), (" DOG RAN HOME. IT SLEPT.", False)]
    assert document.tables[0].cell(0, 0).text == "CELL ONE"
    assert document.sections[0].header.paragraphs[0].text == "HEADER TEXT"
    reversed_ = docx.Document(io.BytesIO(translate_document(docx_sample(), "docx", Reverse())))
    assert reversed_.paragraphs[0].text == "home. ran dog big The slept. It"  # runs keep their order: text does


def test_a_segment_without_words_is_written_back_and_nothing_is_sent():
    identity = Identity()
    segment = Segment(["  ", Atom("<br>"), " "])
    assert translate_segments([segment], identity) == [segment.pieces] and identity.sent == []
