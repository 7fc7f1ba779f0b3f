"""Lines in capitals (decoding/casing.py): which lines are folded, and to what, by hand."""

from __future__ import annotations

import pytest

from transformer.decoding.casing import fold_capitals, in_capitals, sentence_case


@pytest.mark.parametrize(
    "line, folded",
    [
        ("Y DIJO DIOS: SEA LA LUZ.", "Y dijo dios: sea la luz."),
        ("¿QUÉ ES ESTO?", "¿Qué es esto?"),
        ("CAPÍTULO 12", "Capítulo 12"),
        ("NASA", "Nasa"),
    ],
)
def test_a_line_in_capitals_is_folded_to_sentence_case(line, folded):
    assert fold_capitals(line) == (folded, True)


@pytest.mark.parametrize(
    "line",
    [
        "Y ACONTECIÓ en los días",
        "El Libro De Ester",
        "Gabaón, Rama, Beeroth,",
        "A",
        "123 456",
        "",
        "東京 NASA 東京".lower(),
    ],
)
def test_other_lines_are_left_as_they_are(line):
    assert not in_capitals(line) and fold_capitals(line) == (line, False)


def test_sentence_case_keeps_what_is_not_a_letter():
    assert sentence_case("  «ÉL VINO»") == "  «Él vino»" and sentence_case("12 34") == "12 34"
