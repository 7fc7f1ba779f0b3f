"""documents/spans.py and protection.py: what must not change is found, masked from the model and put back exactly
once, whatever the translator does to the words around it (drops them, moves them, doubles them, invents spans)."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
from document_samples import Identity, Reverse

from transformer.documents.lines import ProtectedLine
from transformer.documents.spans import Protection, find_spans
from transformer.errors import UserError

pytest.importorskip("sentencex")

from transformer.documents import translate_document  # noqa: E402


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "Falta %s en %d%% de %(name)s y %1$s",
            [("%s", "p"), ("%d", "p"), ("%%", "p"), ("%(name)s", "p"), ("%1$s", "p")],
        ),
        (
            "Hola {0}, {name!r:>10} y {} y %{ruby} y $HOME y ${PATH}",
            ["{0}", "{name!r:>10}", "{}", "%{ruby}", "$HOME", "${PATH}"],
        ),
        ("{count, plural, one {# file} other {# files}} listos", ["{count, plural, one {# file} other {# files}}"]),
        ("Vea https://gnu.org/a_(b). o www.x.org, juan@x.es.", ["https://gnu.org/a_(b)", "www.x.org", "juan@x.es"]),
        (
            "En /usr/bin/ls, ~/.config, ./configure, C:\\Temp\\x y src/main.c.",
            ["/usr/bin/ls", "~/.config", "./configure", "C:\\Temp\\x", "src/main.c"],
        ),
        ("Use --color=auto o -v, y/o km/h", ["--color=auto", "-v"]),
        ("Son 3,5 km en 2024-01-01 a las 12:30, no v2 ni 3D", ["3,5", "2024-01-01", "12:30"]),
        (
            'Un <span translate="no">Firefox</span> y `make test`',
            ['<span translate="no">Firefox</span>', "`make test`"],
        ),
        ("%sfoo {x}y {{x}", ["%sfoo"[:2], "{x}", "{x}"]),  # glued to a word; a brace never closed opens nothing
        ("50% de descuento, 100 %", ["50", "100"]),  # a lone % is no placeholder
    ],
)
def test_each_kind_is_found_whole_and_ordinary_text_is_not(text, expected):
    found = [text[a:b] for a, b, _ in find_spans(text, Protection())]
    assert found == [e if isinstance(e, str) else e[0] for e in expected]


def test_numbers_are_a_switch_and_patterns_are_the_users():
    assert find_spans("Son 35 ACME-12", Protection(numbers=False)) == []
    spans = find_spans("Son 35 ACME-12", Protection(numbers=False, patterns=(r"ACME-\d+",)))
    assert spans == [(7, 14, "pattern")]
    assert find_spans("%s 3", Protection.off()) == []


@pytest.mark.parametrize(
    "pattern, problem",
    [
        ("(a+)+b", "a repeat inside a repeat"),
        ("(ab|cd)+e", "an alternation inside a repeat"),
        (r"(\w)\1", "a backreference"),
        ("[", "not a regular expression"),
        ("a*", "matches the empty string"),
        ("x" * 201, "at most 200"),
    ],
)
def test_a_pattern_that_could_stall_or_is_broken_is_one_line(pattern, problem):
    with pytest.raises(UserError, match=problem.replace("(", r"\(")) as error:
        Protection(patterns=(pattern,))
    assert "\n" not in str(error.value)


class Mangler(Identity):
    """A translator that drops, moves or doubles words (seeded), and invents a copy of a span now and then."""

    def __init__(self, seed: int, invent: str = "") -> None:
        super().__init__()
        self.rng, self.invent = random.Random(seed), invent

    def one(self, words):
        out = []
        for i in self.rng.sample(range(len(words)), len(words)):  # moved
            out += [(i, words[i])] * self.rng.choice([0, 1, 1, 2])  # dropped, kept, doubled
        text = [w for _, w in out] + ([self.invent] if self.invent else [])
        return " ".join(text), [(i, t) for t, (i, _) in enumerate(out) if self.rng.random() < 0.7]


LINES = [
    "No se pudo determinar el espacio libre en %s",
    "Uso: %s [OPCIÓN]... Vea https://gnu.org/x y --help, o escriba a bugs@gnu.org.",
    "Copiados %d de %d archivos (%.1f%%) a /tmp/x en {0} segundos",
    "%s: %s: %s",
    "{count, plural, one {# archivo} other {# archivos}} en %(dir)s",
    "El valor 42 no es válido para `--level`; use 1 a 9",
]


@pytest.mark.parametrize("seed", range(20))
def test_every_span_comes_back_exactly_once_whatever_the_translator_does(seed):
    """The test STYLE.md asks for: a translator that drops, moves or doubles every token, and even writes a span
    itself, still gets each span back exactly once, as written."""
    for line in LINES:
        protected = ProtectedLine(line, Protection())
        spans = [written for _, written in protected.spans]
        translator = Mangler(seed, invent=spans[0])
        text, alignment = translator.one(protected.text.split()) if protected.text else ("", None)
        restored, _ = protected.restore(text, alignment)
        for span in set(spans):
            assert restored.count(span) == line.count(span), (line, restored)


def test_a_line_of_only_placeholders_is_not_sent_and_comes_back_as_it_was():
    protected = ProtectedLine("  %s: %d  ", Protection())
    assert protected.text == "" and protected.restore("", None) == ("%s: %d", False)
    assert ProtectedLine("plain words", Protection()).text == "plain words"  # no span: as it was


def test_without_alignment_a_span_is_placed_by_position_and_said_so():
    protected = ProtectedLine("abrir %s ahora", Protection())
    assert protected.restore("open now", [(0, 0), (1, 1)]) == ("open %s now", False)
    assert protected.restore("open now", None) == ("open %s now", True)


def test_five_hundred_placeholders_in_a_line_take_little_time():
    line = " ".join(f"w{i} %{i}$s" for i in range(500))
    start = time.perf_counter()
    protected = ProtectedLine(line, Protection())
    restored, _ = protected.restore(*Reverse().one(protected.text.split()))
    assert len(protected.spans) == 500 and Counter(restored.split()) == Counter(line.split())
    assert time.perf_counter() - start < 20  # quadratic at worst, never exponential


@pytest.mark.parametrize("format", ["text", "html", "markdown"])
def test_documents_keep_their_spans_whatever_the_translator_does(format):
    source = {
        "text": "Abra %s con --force en https://x.org hoy.\n",
        "html": '<p>Abra %s con <code>--force</code> en <span class="notranslate">Acme</span> hoy.</p>',
        "markdown": "Abra %s con `--force` en https://x.org hoy.\n",
    }[format]
    for seed in range(10):
        out = translate_document(source, format, Mangler(seed, invent="%s"))
        for span in ("%s", "--force", "https://x.org", '<span class="notranslate">Acme</span>'):
            assert out.count(span) == source.count(span), out
    assert translate_document(source, format, Identity()) == source


def test_a_word_file_keeps_its_spans_in_their_runs():
    import io

    docx = pytest.importorskip("docx")
    document = docx.Document()
    paragraph = document.add_paragraph("No se pudo abrir ")
    paragraph.add_run("%s").bold = True
    paragraph.add_run(" en https://x.org ahora, %d veces.")
    out = io.BytesIO()
    document.save(out)
    for seed in range(10):
        result = docx.Document(io.BytesIO(translate_document(out.getvalue(), "docx", Mangler(seed, invent="%d"))))
        text = result.paragraphs[0].text
        assert [text.count(span) for span in ("%s", "https://x.org", "%d")] == [1, 1, 1], text
        assert any(run.bold and run.text.strip() == "%s" for run in result.paragraphs[0].runs)
