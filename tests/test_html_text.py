"""format: html (transformer/serving/html_text.py): markup kept byte for byte, text runs translated and escaped."""

from __future__ import annotations

import html

import pytest

from transformer.serving.html_text import join_html, split_html, text_of

CASES = [
    "<p>Hola <b>mundo</b>.</p>",
    "plain text, no tags",
    "<!-- a <b>comment</b> --><div class='x' data-a=\"1>2\">dentro</div>",
    "<script>if (a < b) { x = '<p>no</p>'; }</script><p>sí</p>",
    "<pre>keep <this></pre> and <code>this()</code> too",
    "<br/>uno<br>dos<img src='a.png'/>",
    "&lt;tag&gt; &amp; &#241;and&uacute;",
    "<p>unclosed <b",
    "<!doctype html><html><body>  \n  </body></html>",
    "",
]


@pytest.mark.parametrize("markup", CASES)
def test_the_pieces_join_back_to_the_input(markup):
    pieces = split_html(markup)
    assert "".join(p.text for p in pieces) == markup
    out = join_html(pieces, [text_of(p) for p in pieces if p.translated])  # the identity "translation"
    assert html.unescape(out) == html.unescape(markup)  # the same up to how characters are escaped


def test_text_runs_are_what_the_model_reads_and_the_markup_stays():
    markup = "<p>Hola <b>mundo</b>.</p><script>var s = 'no';</script><p>a &amp; b</p>"
    pieces = split_html(markup)
    assert [text_of(p) for p in pieces if p.translated] == ["Hola", "mundo", "a & b"]  # "." alone: not a line
    out = join_html(pieces, ["HELLO", "WORLD", "x < y & z"])
    assert out == "<p>HELLO <b>WORLD</b>.</p><script>var s = 'no';</script><p>x &lt; y &amp; z</p>"


def test_whitespace_around_a_run_is_kept_and_inside_collapsed():
    pieces = split_html("<td>\n   dos\n  palabras  </td>")
    assert [text_of(p) for p in pieces if p.translated] == ["dos palabras"]
    assert join_html(pieces, ["two words"]) == "<td>\n   two words  </td>"
