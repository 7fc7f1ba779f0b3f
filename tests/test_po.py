"""documents/po.py and po_lines.py: gettext catalogues translated as localization tools expect, checked against
polib's reading of the result; a file with nothing to translate comes back byte for byte; bad files are one line."""

from __future__ import annotations

import time

import pytest
from document_samples import SAMPLES, Identity, Reverse, Upper

polib = pytest.importorskip("polib")
pytest.importorskip("sentencex")

from transformer.documents import translate_document  # noqa: E402
from transformer.documents.po import plural_sources  # noqa: E402
from transformer.errors import UserError  # noqa: E402

HEADER = 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset={charset}\\n"\n"Plural-Forms: {plurals}\\n"\n\n'
RUSSIAN = "nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || n%100>=20) ? 1 : 2);"


def _po(body: str, charset: str = "UTF-8", plurals: str = "nplurals=2; plural=(n != 1);") -> str:
    return HEADER.format(charset=charset, plurals=plurals) + body


def test_a_file_with_nothing_to_translate_comes_back_byte_for_byte():
    done = _po('#: a.c:1\nmsgid "Open"\nmsgstr "Abrir"\n\n#~ msgid "Old"\n#~ msgstr "Viejo"\n')
    for data in (done, done.encode(), done.replace("\n", "\r\n").encode(), b"\xef\xbb\xbf" + done.encode()):
        assert translate_document(data, "po", Upper()) == data


def test_entries_are_filled_marked_fuzzy_and_nothing_else_changes():
    source = SAMPLES["po"]
    out = translate_document(source, "po", Upper())
    catalogue, before = polib.pofile(out), polib.pofile(source)
    entries = {(e.msgctxt, e.msgid): e for e in catalogue}
    opened = entries[("menu", "Could not open %s: the file is gone.")]
    assert opened.msgstr == "COULD NOT OPEN %s: THE FILE IS GONE." and opened.flags == ["fuzzy", "c-format"]
    assert opened.occurrences == [("src/main.c", "10")]  # references and context kept
    usage = entries[(None, "Usage: cp [OPTION]...\nCopy files. See https://gnu.org for more.\n")]
    assert usage.msgstr == "USAGE: CP [OPTION]...\nCOPY FILES. SEE https://gnu.org FOR MORE.\n"  # the ends kept
    assert entries[(None, "Done")].msgstr == "Hecho" and "fuzzy" not in entries[(None, "Done")].flags
    assert [e.msgid for e in catalogue.obsolete_entries()] == [e.msgid for e in before.obsolete_entries()]
    assert catalogue.metadata == before.metadata
    removed = [line for line in source.split("\n") if line not in out.split("\n")]
    assert all(line.startswith(("msgstr", "#,")) for line in removed)  # only msgstr and flag lines changed


def test_plural_forms_follow_the_target_languages_header():
    body = '#, c-format\nmsgid "%d file"\nmsgid_plural "%d files"\nmsgstr[0] ""\nmsgstr[1] ""\n'
    english = polib.pofile(translate_document(_po(body), "po", Upper()))[0]
    assert english.msgstr_plural == {0: "%d FILE", 1: "%d FILES"}
    russian = polib.pofile(translate_document(_po(body, plurals=RUSSIAN), "po", Upper()))[0]
    assert russian.msgstr_plural == {0: "%d FILES", 1: "%d FILES", 2: "%d FILES"}  # form 0 serves 1, 21, 31...
    japanese = polib.pofile(translate_document(_po(body, plurals="nplurals=1; plural=0;"), "po", Upper()))[0]
    assert japanese.msgstr_plural == {0: "%d FILES"}


@pytest.mark.parametrize(
    "header, singular_forms",
    [
        ("nplurals=2; plural=(n != 1);", [True, False]),
        ("nplurals=2; plural=(n > 1);", [False, False]),
        (RUSSIAN, [False, False, False]),
        ("nplurals=3; plural=n==1 ? 0 : n==2 ? 1 : 2;", [True, False, False]),
        ("", [True, False]),
        ("nplurals=INTEGER; plural=EXPRESSION;", [True, False]),
    ],
)
def test_which_plural_form_comes_from_the_singular(header, singular_forms):
    assert plural_sources(header, "x.po") == singular_forms


def test_translated_entries_are_left_alone_unless_asked():
    source = SAMPLES["po"]
    again = polib.pofile(translate_document(source, "po", Upper(), retranslate=True))
    done = next(e for e in again if e.msgid == "Done")
    assert done.msgstr == "DONE" and "fuzzy" in done.flags
    filled = translate_document(source, "po", Upper())
    assert translate_document(filled, "po", Reverse()) == filled  # nothing left to translate


def test_a_charset_other_than_utf8_is_read_and_written_in_it():
    data = _po('msgid "Año %s"\nmsgstr ""\n', charset="ISO-8859-1").encode("latin-1")
    out = translate_document(data, "po", Identity())
    assert out.decode("latin-1").endswith('msgstr "Año %s"\n') and b"\xf1" in out


@pytest.mark.parametrize(
    "body, plurals, expected",
    [
        ('msgid "abc\nmsgstr ""\n', None, "line 6: a string that never ends"),
        ('msgid "a\\qb"\nmsgstr ""\n', None, "line 6: bad escape '\\\\q'"),
        ('msgid "a"\n\nmsgid "b"\nmsgstr ""\n', None, "line 7: the entry that starts on line 6 has no msgstr"),
        ('msgid "a" x\nmsgstr ""\n', None, "line 6: text after the closing quote"),
        ("hello\n", None, "line 6: expected msgctxt, msgid"),
        ('msgid "a"\nmsgstr ""\n', "nplurals=2; plural=(n ! 1);", "invalid Plural-Forms expression"),
        ('msgid "a"\nmsgstr ""\n', "nplurals=2; plural=n;", "gives form 2 for n = 2"),
        ('msgid "a"\nmsgstr ""\n', "plural=n;", "invalid Plural-Forms header"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_line(body, plurals, expected):
    data = _po(body, plurals=plurals or "nplurals=2; plural=(n != 1);")
    with pytest.raises(UserError, match=expected.replace("(", r"\(").replace("\\\\q", r"\\\\q")) as error:
        translate_document(data, "po", Identity(), name="x.po")
    assert "\n" not in str(error.value)


def test_mixed_encodings_and_a_path_for_content_are_refused():
    mixed = _po('msgid "Año"\nmsgstr ""\n').encode() + 'msgid "Niño"\nmsgstr ""\n'.encode("latin-1")
    with pytest.raises(UserError, match=r"line 8: byte 0xf1 is not utf-8"):
        translate_document(mixed, "po", Identity(), name="x.po")
    with pytest.raises(UserError, match="not a PO file|expected msgctxt"):  # polib would read the named file
        translate_document(__file__, "po", Identity(), name="x.po")


def test_ten_thousand_entries_in_bounded_time():
    body = "".join(f'#: f.c:{i}\nmsgid "Line {i} of %s"\nmsgstr ""\n\n' for i in range(10_000))
    start = time.perf_counter()
    out = translate_document(_po(body), "po", Identity())
    assert out.count("#, fuzzy") == 10_000 and time.perf_counter() - start < 120
