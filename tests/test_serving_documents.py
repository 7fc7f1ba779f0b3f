"""`format: html` in POST /translate (transformer/serving/documents.py): each item translated as an HTML document
by transformer.documents, its sentences decoded by the batcher, served in-process on a loopback port over scripted
engines (tests/serve_client.py).

Each case is written out by hand: the input, the sentences the model reads, and the output when each sentence's
translation is the sentence upper-cased with no alignment (tags placed by the proportional guess). An engine that
gives each sentence back with the identity alignment gives every well-formed input back byte for byte (the server
asks for alignments and places the tags by them); malformed markup is a 400 with the documents package's line.
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("sentencex")

from document_samples import Identity  # noqa: E402
from serve_client import EchoEngine, ScriptedEngine, call, in_process  # noqa: E402

from transformer.config import ServeConfig  # noqa: E402
from transformer.documents import translate_document  # noqa: E402
from transformer.errors import UserError  # noqa: E402

LANGS = {"source": "es", "target": "en"}


@pytest.fixture(scope="module")
def upper():
    engine = ScriptedEngine()
    with in_process(engine, ServeConfig(batch_wait_ms=0)) as port:
        yield engine, port


@pytest.fixture(scope="module")
def echo():
    engine = EchoEngine()
    with in_process(engine, ServeConfig(batch_wait_ms=0)) as port:
        yield engine, port


def html(port, q, **fields):
    return call(port, "POST", "/translate", {"q": q, **LANGS, "format": "html", **fields})


CASES = [  # (input, the sentences the model reads, the output with upper-cased translations)
    ("<p>Hola <b>mundo</b>.</p>", ["Hola mundo."], "<p>HOLA <b>MUNDO.</b></p>"),
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
    (  # code is kept as written, masked from the model (a protected span)
        "<pre>keep <this></pre> and <code>this()</code> too",
        ["and too"],
        "<pre>keep <this></pre> AND <code>this()</code> TOO",
    ),
    ("&lt;tag&gt; &amp; &#241;and&uacute;", ["<tag> & ñandú"], "&lt;TAG&gt; &amp; ÑANDÚ"),
    ("<![CDATA[ x > y ]]>texto", ["texto"], "<![CDATA[ x > y ]]>TEXTO"),
    ("<br/>uno<br>dos<img src='a.png'/>", ["uno dos"], "<br/>UNO<br>DOS<img src='a.png'/>"),
    ("<td>\n   dos\n  palabras  </td>", ["dos palabras"], "<td>\n   DOS\n  PALABRAS  </td>"),
    ("<!doctype html><html><body>  \n  </body></html>", [], "<!doctype html><html><body>  \n  </body></html>"),
    ("<?xml version='1.0'?><p>sí</p>", ["sí"], "<?xml version='1.0'?><p>SÍ</p>"),
    ("a < b y c", ["a < b y c"], "A &lt; B Y C"),  # a '<' that starts nothing is text, escaped when written
    ("<p>a</p</p>b", ["a", "b"], "<p>A</p</p>B"),
    ("</p>suelto</b>", ["suelto"], "</p>SUELTO</b>"),
    ("<p>The <i>red <b>cat</b></i> sat.</p>", ["The red cat sat."], "<p>THE <i>RED <b>CAT</b></i> SAT.</p>"),
]
MALFORMED = [  # (input, the 400's message after "Invalid request: q: line 1: ")
    ("<p>sin cerrar <b", "a tag or comment that never ends ('<b'...)"),
    ('<p>ok</p><a href="x', "a tag or comment that never ends ('<a href=\"x'...)"),
    ("uno <!-- sin cerrar", "a tag or comment that never ends ('<!-- sin cerrar'...)"),
    ("x</>y", "a tag or comment that never ends ('</>y'...)"),
    ("<script>sin cerrar, no es texto", "<script> is never closed"),
    ("antes <![ !&[ y despues", "a tag or comment that never ends ('<![ !&[ y despues'...)"),
    ("<p><b><i>x</b></i></p>", "</b> closes <b> while <i> inside it is still open"),
]


@pytest.mark.parametrize("markup, sentences, output", CASES)
def test_the_sentences_the_model_reads_and_the_output_written_out_by_hand(upper, markup, sentences, output):
    engine, port = upper
    before = len(engine.calls)
    status, _, answer = html(port, markup)
    assert status == 200 and answer == {"translatedText": output}
    assert [line for call in engine.calls[before:] for line in call] == sentences


@pytest.mark.parametrize("markup", [markup for markup, _, _ in CASES])
def test_a_translation_that_changes_nothing_gives_the_input_back_byte_for_byte(echo, markup):
    assert html(echo[1], markup)[::2] == (200, {"translatedText": markup})


@pytest.mark.parametrize("markup, message", MALFORMED)
def test_malformed_markup_is_a_400_with_the_documents_packages_line(upper, markup, message):
    engine, port = upper
    before = len(engine.calls)
    status, _, answer = html(port, markup)
    assert status == 400 and answer["error"].startswith("Invalid request: q: line 1: ")
    assert message in answer["error"] and len(engine.calls) == before  # nothing decoded


def test_a_sentence_is_no_longer_cut_at_its_inline_tags(upper):
    engine, port = upper
    before = len(engine.calls)
    assert html(port, "Hola <b>mundo</b>.")[::2] == (200, {"translatedText": "HOLA <b>MUNDO.</b>"})
    assert engine.calls[before:] == [["Hola mundo."]]  # one sentence, in one call


def test_a_list_q_keeps_libretranslates_shape_with_alternatives_and_each_items_errors_named(upper):
    engine, port = upper
    status, _, answer = html(port, ["<p>uno <i>dos</i></p>", "", "tres"], alternatives=1)
    assert status == 200 and answer == {
        "translatedText": ["<p>UNO <i>DOS</i></p>", "", "TRES"],
        "alternatives": [["<p>UNO <i>DOS</i></p>"], [""], ["TRES"]],  # the scripted engine has one hypothesis
    }
    detected = html(port, "<b>solo</b>", source="auto")[2]
    assert detected["translatedText"] == "<b>SOLO</b>" and detected["detectedLanguage"]["language"] == "es"
    assert 0 < detected["detectedLanguage"]["confidence"] <= 100  # py3langid's probability, in percent
    status, _, answer = html(port, ["<p>bien</p>", "<p>mal <b"])
    assert status == 400 and answer["error"].startswith("Invalid request: q[1]: line 1: a tag or comment")


def test_the_sentences_of_an_html_request_count_against_its_line_and_character_limits():
    with in_process(ScriptedEngine(), ServeConfig(batch_wait_ms=0, max_lines=2, max_chars=20)) as port:
        assert html(port, "<p>Uno.</p><p>Dos.</p>")[0] == 200
        status, _, answer = html(port, "<p>Uno.</p><p>Dos.</p><p>Tres.</p>")
        assert status == 400 and "request (3 lines) exceeds text limit (2 lines" in answer["error"]
        status, _, answer = html(port, "<p>una frase larga de muchas palabras</p>")
        assert status == 400 and "line 1 (34 characters) exceeds text limit (20 characters" in answer["error"]


def test_any_string_of_htmls_delimiters_translates_back_byte_for_byte_or_is_one_user_error():
    """What the server does with a `format: html` item: never an exception other than the 400's UserError (a
    malformed `<![` made html.parser raise AssertionError before Python 3.13: a 500 and a traceback)."""
    alphabet = ["<", ">", "!", "[", "]", "-", "/", "?", '"', "'", "a", " ", "&", ";", "#", "=", "\n", "<!--", "-->"]
    alphabet += ["&amp;", "<script>", "</script>", "<pre>", "<![CDATA[", "]]>", "<b>", "</b>", "p>", "é", "<![ "]
    rng = random.Random(0)
    refused = 0
    for _ in range(3000):
        markup = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 14)))
        try:
            assert translate_document(markup, "html", Identity()) == markup, markup
        except UserError:
            refused += 1
    assert 0 < refused < 3000
