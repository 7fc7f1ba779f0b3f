"""transformer/benchmarks/protection.py: which placeholders a message must keep (by hand), the share kept, and
messages read from a gettext .mo catalogue."""

from __future__ import annotations

import pytest

from transformer.benchmarks.protection import catalogue_messages, kept_share, placeholders

polib = pytest.importorskip("polib")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("No se pudo abrir %s: %d (%5.2f%%)", ["%5.2f", "%%", "%d", "%s"]),
        ("Hola {name}, vea https://x.org/a, o --help", ["--help", "https://x.org/a", "{name}"]),
        ("Escriba a bugs@gnu.org.", ["bugs@gnu.org"]),
        ("Sin nada que guardar", []),
    ],
)
def test_the_placeholders_of_a_message(text, expected):
    assert placeholders(text) == sorted(expected)


def test_the_share_kept_counts_each_placeholder_as_often_as_it_went_in():
    sources = ["abrir %s", "de %s a %s", "{0} y {1}", "copiar %d"]
    outputs = ["open %s", "from %s to", "{1} and {0}", "copy %d %d"]
    assert kept_share(sources, outputs) == 0.5  # order is free; a lost or doubled one is not kept


def test_messages_come_from_a_catalogues_translations(tmp_path):
    catalogue = polib.POFile()
    for i, text in enumerate(["Abrir %s", "Hecho", "Línea uno\\nLínea dos %d", "Vea {0}"]):
        catalogue.append(polib.POEntry(msgid=f"m{i}", msgstr=text.replace("\\n", "\n")))
    catalogue.save_as_mofile(str(tmp_path / "app.mo"))
    messages, names = catalogue_messages(tmp_path, 10)
    assert sorted(messages) == ["Abrir %s", "Vea {0}"] and names == ["app"]
