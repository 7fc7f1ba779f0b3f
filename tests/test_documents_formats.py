"""transformer/documents/: what each format keeps, and bad files (invalid UTF-8, broken markup, a corrupt docx, an
unknown format, a missing extra) refused with one line naming the problem."""

from __future__ import annotations

import importlib.util

import pytest
from document_samples import SAMPLES, Identity, Upper, docx_sample
from hostile_documents import nested_markdown

pytest.importorskip("sentencex")

from transformer.commands.flags import DOCUMENT_FORMATS  # noqa: E402
from transformer.documents import FORMATS, guess_format, read_document, require, translate_document  # noqa: E402
from transformer.errors import UserError  # noqa: E402


def test_the_command_line_offers_every_format():
    assert tuple(FORMATS) == DOCUMENT_FORMATS


def test_html_keeps_scripts_styles_code_comments_and_translate_no_as_written():
    out = translate_document(SAMPLES["html"], "html", Upper())
    for kept in (
        '<p translate="no">Do not <b>touch</b></p>',
        "<pre>keep  this</pre>",
        "<style>p { color: red }</style>",
        "<script>if (a < b) { x(); }</script>",
        "<code>make test</code>",
        "<!-- a comment -->",
        'href="/x"',
    ):
        assert kept in out
    assert "<title>MY PAGE</title>" in out and 'alt="A cat"' in out and 'title="A link"' in out


def test_html_alt_and_title_are_translated_when_asked():
    out = translate_document(SAMPLES["html"], "html", Upper(), attributes=True)
    assert 'alt="A CAT"' in out and 'title="A LINK"' in out
    assert translate_document(SAMPLES["html"], "html", Identity(), attributes=True) == SAMPLES["html"]


def test_markdown_keeps_code_blocks_urls_and_definitions():
    out = translate_document(SAMPLES["markdown"], "markdown", Upper())
    for kept in (
        "```\ncode block\n```",
        "    indented code",
        "[ref]: http://y",
        "<http://auto.link>",
        "![alt *a*](i.png)",
        "`code here`",
        '(http://x.com "t")',
        "|---|---|",
    ):
        assert kept in out
    assert out.startswith("# TITLE *WITH EMPHASIS* #\n") and "- ITEM ONE\n  MORE" in out


def test_markdown_nested_within_the_parsers_limit_is_translated_whole():
    """45 list items, each inside the one before (90 of the parser's 100 levels): every item is translated."""
    source = "".join("  " * k + f"- item number {k}.\n" for k in range(45))
    out = translate_document(source, "markdown", Upper())
    assert out == "".join("  " * k + f"- ITEM NUMBER {k}.\n" for k in range(45))


@pytest.mark.parametrize("depth", [34, 35, 10_000])
def test_markdown_nested_past_the_parsers_limit_is_refused_never_left_untranslated(depth):
    """The parser skips what lies deeper than its 100 levels, text included: refused in one line rather than written
    back with that text untranslated (it used to be, with 0 segments). 33 quotes and items (99 levels) pass whole."""
    with pytest.raises(UserError) as raised:
        read_document(nested_markdown(depth), "markdown", name="deep.md")
    message = str(raised.value)
    assert (
        message.startswith("deep.md: line 1: quotes and lists nest more than 100 levels deep") and "\n" not in message
    )
    shallow = translate_document(nested_markdown(33), "markdown", Upper())
    assert shallow == nested_markdown(33).upper()  # every sentence, the deepest too


@pytest.mark.parametrize(
    "format, data, expected",
    [
        ("text", b"fine\n\xff\xfe here\n", "line 2 is not valid UTF-8"),
        ("html", b"<p>ok</p>\n<p>\xc3(</p>", "line 2 is not valid UTF-8"),
        ("html", "<p>\n<b><i>x</b></i></p>", "line 2: </b> closes <b> while <i> inside it is still open"),
        ("html", '<p>Hello <b class="x', "line 1: a tag or comment that never ends"),
        ("html", "<p>Hello <!-- open", "a tag or comment that never ends"),
        (
            "html",
            "<p>Hello <![ x &[ y",
            "line 1: a tag or comment that never ends ('<![ x &[ y'...)",
        ),  # html.parser raised
        ("html", "<p>a</p>\n<script>var x;", "line 2: <script> is never closed"),
        ("markdown", "a\r\nb\nc\r\n", "mixes CRLF and LF line endings"),
        (
            "srt",
            "1\n00:00:01,000 --> 00:00:02,000\nhi\n\ntwo\n00:00:03,000 --> 00:00:04,000\nyo\n",
            "line 5: not an SRT",
        ),
        ("srt", "1\n00:00:0x,000 --> 00:00:02,000\nhi\n", "line 2: not an SRT time"),
        ("vtt", "00:01.000 --> 00:02.000\nhi\n", "not a valid WebVTT file"),
        ("vtt", "WEBVTT\n\n00:01.000 --> bad\nhi\n", "not a valid WebVTT file"),
        ("docx", b"PK\x03\x04 not really a zip", "not a Word .docx file"),
        ("docx", b"plain text", "not a Word .docx file"),
        ("docx", "a str", "a .docx document is bytes"),
        ("pdf", b"%PDF", "unknown document format 'pdf'"),
    ],
)
def test_a_bad_document_is_one_line_naming_the_problem(format, data, expected):
    with pytest.raises(UserError) as caught:
        read_document(data, format, name="in.file")
    message = str(caught.value)
    assert expected in message and "\n" not in message


def test_a_docx_with_no_word_document_inside_is_refused():
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "hi")
    with pytest.raises(UserError, match="not a Word .docx file"):
        read_document(buffer.getvalue(), "docx")
    half = docx_sample()[:2000]
    with pytest.raises(UserError, match="not a Word .docx file"):
        read_document(half, "docx")


def test_the_format_is_guessed_from_the_extension():
    extensions = ("txt", "HTML", "md", "srt", "vtt", "docx", "po", "xlf")
    assert [guess_format(f"a.{e}") for e in extensions] == list(FORMATS)
    assert guess_format("a.pot") == "po" and guess_format("a.xliff") == "xliff"
    with pytest.raises(UserError, match="cannot tell the format of a.pdf from its extension; give --format"):
        guess_format("a.pdf")


def test_a_missing_extra_names_the_extra_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "srt" else real(name, *a))
    with pytest.raises(UserError, match=r"format srt needs the documents extra \(srt missing\): pip install -e"):
        require("srt")
    require("html")  # only the standard library and sentencex
