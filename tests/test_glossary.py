"""Glossaries (decoding/glossary.py): the file format and its refusals, and which terms a sentence holds (whole words,
case, longest first, non-overlapping), against a brute-force matcher written with regular expressions."""

from __future__ import annotations

import random
import re

import pytest

from transformer.decoding.glossary import Glossary, Term, as_glossary, find_terms, merged, term_targets
from transformer.errors import UserError


def targets(terms: list[Term], sentence: str) -> list[str]:
    return Glossary(terms).targets(sentence)


@pytest.mark.parametrize(
    "sentence, found",
    [
        ("Dios creó los cielos", ["God"]),  # at the start of the line
        ("y creó Dios", ["God"]),  # at its end
        ("(Dios), dijo: ¡Dios!", ["God"]),  # next to punctuation; twice, asked once
        ("Y dijo Dios.", ["God"]),
        ("Diosa y semidioses", []),  # inside a word: not the word
        ("DIOS y dios", ["God"]),  # any case
        ("", []),
        ("Jean-Dios", ["God"]),  # a hyphen is not a word character
    ],
)
def test_a_term_is_found_exactly_where_its_words_occur(sentence, found):
    assert targets([Term("Dios", "God")], sentence) == found


def test_longest_first_and_non_overlapping():
    terms = [
        Term("Dios", "God"),
        Term("Espíritu de Dios", "Spirit of God"),  # holds "Dios": the longer wins
        Term("Nueva York", "New York"),
        Term("York City Hall", "YCH"),  # overlaps "Nueva York" and is longer: it wins
        Term("casa", "house"),
        Term("casa blanca", "White House"),
    ]
    g = Glossary(terms)
    sentence = "el Espíritu de Dios, Dios, Nueva York City Hall y la casa blanca casa"
    assert [(sentence[m.start : m.end], m.term.target) for m in g.matches(sentence)] == [
        ("Espíritu de Dios", "Spirit of God"),
        ("Dios", "God"),
        ("York City Hall", "YCH"),
        ("casa blanca", "White House"),
        ("casa", "house"),
    ]
    assert g.targets(sentence) == ["Spirit of God", "God", "YCH", "White House", "house"]
    assert g.targets("Nueva York") == ["New York"]  # alone, the shorter term is found


def test_ties_go_to_the_earlier_occurrence_then_the_earlier_term():
    g = Glossary([Term("b c", "second"), Term("a b", "first"), Term("A B", "cased", cased=True)])
    assert g.targets("a b c") == ["first"]  # "a b" and "b c" are as long: the earlier in the sentence
    assert g.targets("A B") == ["cased"]  # a cased term before an uncased one over the same words
    two = [Glossary([Term("a b", "mine")]), Glossary([Term("a b", "theirs")])]
    assert term_targets("x a b", two) == ["mine"]  # of several glossaries, the first's


def test_case_insensitive_unless_cased():
    g = Glossary([Term("señor", "lord"), Term("Señor", "LORD", cased=True), Term("straße", "street")])
    assert g.targets("el Señor") == ["LORD"]
    assert g.targets("el señor y el SEÑOR") == ["lord"]
    assert g.targets("die STRASSE") == ["street"]  # casefolded, as str.casefold does


def test_spacing_and_unicode_forms():
    g = Glossary([Term("Nueva York", "New York"), Term("café", "coffee"), Term("S.A.", "Inc.")])
    assert g.targets("en Nueva   York") == ["New York"]  # any amount of space where the term has space
    assert g.targets("en NuevaYork") == []  # none where it has some
    assert g.targets("un cafe\u0301 y S.A.") == ["coffee", "Inc."]  # NFC: a decomposed é is é; punctuation in a term


def regex_oracle(terms: list[Term], sentence: str) -> list[str]:
    """Brute force: every occurrence of every (word-only) term, found by a regular expression on word boundaries,
    overlapping ones included; then the longest first, ties to the earlier start then the earlier term, skipping
    any that overlaps one taken; their targets in sentence order, each once."""
    found = []
    for order, term in enumerate(terms):
        body = r"\s+".join(re.escape(w) for w in term.source.split())
        flags = 0 if term.cased else re.IGNORECASE
        for m in re.finditer(rf"(?<!\w)(?=({body})(?!\w))", sentence, flags):
            start, end = m.start(1), m.end(1)
            found.append((-(end - start), not term.cased, start, order, end))
    taken, kept = set(), []
    for _, _, start, order, end in sorted(found):
        if not taken & set(range(start, end)):
            taken |= set(range(start, end))
            kept.append((start, terms[order].target))
    return list(dict.fromkeys(target for _, target in sorted(kept)))


@pytest.mark.parametrize("seed", range(40))
def test_matching_equals_brute_force(seed):
    rng = random.Random(seed)
    words = ["a", "b", "ab", "B", "c"]
    terms, seen = [], set()
    for i in range(rng.randint(1, 6)):
        source = " ".join(rng.choice(words) for _ in range(rng.randint(1, 3)))
        cased = rng.random() < 0.3
        key = (source if cased else source.lower(), cased)
        if key not in seen:
            seen.add(key)
            terms.append(Term(source, f"t{i}", cased))
    for _ in range(20):
        sentence = rng.choice(["", " "]).join(
            rng.choice(words + [",", ".", "  "]) + rng.choice([" ", "", ", "]) for _ in range(rng.randint(0, 8))
        )
        assert targets(terms, sentence) == regex_oracle(terms, sentence), (terms, sentence)


def test_merged_keeps_the_callers_phrases_first_and_asks_each_once():
    assert merged(["dog"], ["house", "dog", "cat"]) == ["dog", "house", "cat"]
    assert merged([], []) == [] and merged([" dog "], ["dog"]) == [" dog "]


# ------------------------------------------------------------------------------------------------- the file


def write(tmp_path, data: bytes | str):
    path = tmp_path / "terms.tsv"
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def test_the_file_format(tmp_path):
    text = (
        "\ufeff# a comment\n\nDios\tGod\n  # an indented comment\nSeñor\tLORD\tcased\nsanto\tholy\t0\n"
        "Juan\tJohn\t1\r\nPedro\t Peter \tUNCASED\nDios\tGod\n"  # CRLF; spaces around a term; a repeat dropped
    )
    g = Glossary.load(write(tmp_path, text))
    assert g.terms == (
        Term("Dios", "God"),
        Term("Señor", "LORD", True),
        Term("santo", "holy"),
        Term("Juan", "John", True),
        Term("Pedro", "Peter"),
    )
    assert len(g) == 5 and g.name.endswith("terms.tsv")
    assert (
        as_glossary(g) is g and as_glossary(None) is None and as_glossary(str(tmp_path / "terms.tsv")).terms == g.terms
    )


def test_an_empty_glossary_is_no_glossary(tmp_path):
    g = Glossary.load(write(tmp_path, "# nothing yet\n\n"))
    assert not g and g.targets("Dios") == [] and find_terms("Dios", [g]) == []


@pytest.mark.parametrize(
    "data, message",
    [
        ("Dios\tGod\nsanto\n", "terms.tsv line 2: 1 column(s); write 'source term<TAB>target term'"),
        ("a\tb\tcased\tx\n", "terms.tsv line 1: 4 column(s)"),
        ("\n \tGod\n", "terms.tsv line 2: the source term is empty"),
        ("Dios\t \n", "terms.tsv line 1: the target term is empty"),
        ("Dios\tGod\tsometimes\n", "terms.tsv line 1: the third column is 'sometimes'"),
        (b"Dios\tGod\nsanto\tholy\ncaf\xe9\tcoffee\n", "terms.tsv line 3 is not valid UTF-8"),
        ("Dios\tGod\n#\nDIOS\tLord\n", "line 3: the source term 'DIOS' is already in the glossary ("),
    ],
)
def test_a_bad_file_is_one_error_naming_the_file_and_line(tmp_path, data, message):
    with pytest.raises(UserError) as caught:
        Glossary.load(write(tmp_path, data))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_file_or_a_folder_is_refused(tmp_path):
    with pytest.raises(UserError, match="glossary file not found: .*nothing.tsv"):
        Glossary.load(tmp_path / "nothing.tsv")
    with pytest.raises(UserError, match="is a folder"):
        Glossary.load(tmp_path)
    with pytest.raises(UserError, match="give a Glossary or the path"):
        as_glossary(42)


def test_pairs_as_a_request_gives_them():
    g = Glossary.from_pairs([["Dios", "God"], ["Señor", "LORD", True], ("santo", "holy", False)])
    assert g.targets("el Señor Dios santo") == ["LORD", "God", "holy"]
    for pairs, message in [
        ("Dios", "give a list of [source, target] pairs"),
        ([["Dios"]], "glossary_terms item 1: give [source, target]"),
        ([["a", "b"], ["Dios", "God", "yes"]], "glossary_terms item 2: give [source, target]"),
        ([["a", "b"], ["c", "\ud800"]], "item 2: the target term holds a lone surrogate"),
        ([["a\nb", "c"]], "item 1: the source term holds a tab or a line break"),
        ([["a", "b"], ["A", "c"]], "item 2: the source term 'A' is already in the glossary (glossary_terms item 1)"),
    ]:
        with pytest.raises(UserError, match=re.escape(message)):
            Glossary.from_pairs(pairs)
