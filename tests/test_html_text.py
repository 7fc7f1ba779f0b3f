"""format: html (transformer/serving/html_text.py): markup kept byte for byte, text runs translated and escaped.

Each case is written out by hand: the input, the lines the model reads, and the output when each line's translation
is the line upper-cased. A translation that changes nothing gives the input back byte for byte.
"""

from __future__ import annotations

import random

import pytest

from transformer.serving.html_text import join_html, split_html, text_of

CASES = [  # (input, what the model reads, the output with upper-cased translations)
    ("<p>Hola <b>mundo</b>.</p>", ["Hola", "mundo"], "<p>HOLA <b>MUNDO</b>.</p>"),
    ("plain text, no tags", ["plain text, no tags"], "PLAIN TEXT, NO TAGS"),
    ('<a title="x > y">dentro</a>', ["dentro"], '<a title="x > y">DENTRO</a>'),
    ("<img alt='a>b' src=x>pie", ["pie"], "<img alt='a>b' src=x>PIE"),
    (
        "<!-- a <b>comment</b> --><div class='x' data-a=\"1>2\">dentro</div>",
        ["dentro"],
        "<!-- a <b>comment</b> --><div class='x' data-a=\"1>2\">DENTRO</div>",
    ),
    (
        "<script>if (a < b) { x = '<p>no</p>'; }</script><style>p > b { }</style><p>sí</p>",
        ["sí"],
        "<script>if (a < b) { x = '<p>no</p>'; }</script><style>p > b { }</style><p>SÍ</p>",
    ),
    (
        "<pre>keep <this></pre> and <code>this()</code> too",
        ["and", "too"],
        "<pre>keep <this></pre> AND <code>this()</code> TOO",
    ),
    ("&lt;tag&gt; &amp; &#241;and&uacute;", ["<tag> & ñandú"], "&lt;TAG&gt; &amp; ÑANDÚ"),
    ("<![CDATA[ x > y ]]>texto", ["texto"], "<![CDATA[ x > y ]]>TEXTO"),
    ("<br/>uno<br>dos<img src='a.png'/>", ["uno", "dos"], "<br/>UNO<br>DOS<img src='a.png'/>"),
    ("<td>\n   dos\n  palabras  </td>", ["dos palabras"], "<td>\n   DOS PALABRAS  </td>"),
    ("<!doctype html><html><body>  \n  </body></html>", [], "<!doctype html><html><body>  \n  </body></html>"),
    ("<?xml version='1.0'?><p>sí</p>", ["sí"], "<?xml version='1.0'?><p>SÍ</p>"),
    ("", [], ""),
    # malformed: what is still open at the end is markup; a '<' that starts nothing is text
    ("<p>sin cerrar <b", ["sin cerrar"], "<p>SIN CERRAR <b"),
    ('<p>ok</p><a href="x', ["ok"], '<p>OK</p><a href="x'),
    ("uno <!-- sin cerrar", ["uno"], "UNO <!-- sin cerrar"),
    ("a < b y c", ["a < b y c"], "A &lt; B Y C"),
    ("x</>y", ["x", "y"], "X</>Y"),
    ("<p>a</p</p>b", ["a", "b"], "<p>A</p</p>B"),
    ("</p>suelto</b>", ["suelto"], "</p>SUELTO</b>"),
    ("<script>sin cerrar, no es texto", [], "<script>sin cerrar, no es texto"),
    ("antes <![ !&[ y despues", ["antes"], "ANTES <![ !&[ y despues"),
]


@pytest.mark.parametrize("markup, lines, upper", CASES)
def test_the_lines_the_model_reads_and_the_output_written_out_by_hand(markup, lines, upper):
    pieces = split_html(markup)
    assert "".join(p.text for p in pieces) == markup
    assert [text_of(p) for p in pieces if p.translated] == lines
    assert join_html(pieces, [line.upper() for line in lines]) == upper


@pytest.mark.parametrize("markup", [markup for markup, _, _ in CASES])
def test_a_translation_that_changes_nothing_gives_the_input_back_byte_for_byte(markup):
    pieces = split_html(markup)
    assert join_html(pieces, [text_of(p) for p in pieces if p.translated]) == markup


def test_whitespace_around_a_run_is_kept_and_inside_collapsed():
    pieces = split_html("<td>\n   dos\n  palabras  </td>")
    assert join_html(pieces, ["two words"]) == "<td>\n   two words  </td>"


def test_any_string_splits_into_pieces_that_join_back_to_it():
    """Random strings of HTML's delimiters (html.parser raises on some of them before Python 3.13: `<![` junk)."""
    alphabet = ["<", ">", "!", "[", "]", "-", "/", "?", '"', "'", "a", " ", "&", ";", "#", "=", "\n", "<!--", "-->"]
    alphabet += ["&amp;", "<script>", "</script>", "<pre>", "<![CDATA[", "]]>", "<b>", "</b>", "p>", "é"]
    rng = random.Random(0)
    for _ in range(3000):
        markup = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 14)))
        pieces = split_html(markup)
        assert "".join(p.text for p in pieces) == markup
        assert join_html(pieces, [text_of(p) for p in pieces if p.translated]) == markup
