"""Glossaries through the Python API and transformer-translate, on the tiny checkpoint (decoding/glossary.py, read by
decoding/steering.py): a term's target is a constraint of exactly the lines that hold its source, lines without a
term decode as without a glossary, terms that cannot fit are relaxed and reported, and bad files are one line."""

from __future__ import annotations

import itertools
import json
import logging

import pytest
import tiny_checkpoint
import torch

from transformer import Glossary, Translator, UserError
from transformer.commands.cli import translate_main
from transformer.decoding import streaming as streaming
from transformer.decoding.glossary import Term
from transformer.decoding.steering import steered, word_continuations

LINES = ["the cat sat on the mat", "a dog ran home", "", "The Cat", "a small cat, then", "the house"]
TERMS = "# tiny terms\ncat\tdog\nthe house\tbig\n\nsmall cat\tred\n"  # "small cat" holds "cat": the longer wins


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("glossary")
    found = tiny_checkpoint.build(folder)
    (folder / "terms.tsv").write_text(TERMS, encoding="utf-8")
    return {**found, "terms": folder / "terms.tsv"}


@pytest.fixture(scope="module")
def translator(tiny):
    return Translator.from_checkpoint(tiny["checkpoint"], device="cpu", beam_size=3, max_len_b=10)


def contains(tokens, phrase) -> bool:
    return any(tokens[i : i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


def as_tuples(results):
    return [[(h.tokens, round(h.score, 5), h.relaxed, h.unmet) for h in hyps] for hyps in results]


def test_each_line_is_constrained_by_exactly_the_terms_it_holds(tiny, translator):
    glossary = Glossary.load(tiny["terms"])
    asked = [s.texts if s else () for _, s in steered(LINES, translator.tokenizer, None, None, glossary)]
    assert asked == [("dog",), (), (), ("dog",), ("red",), ("big",)]  # any case; longest first; at punctuation
    results = translator.translate(LINES, nbest=2, glossary=glossary)
    plain = translator.translate(LINES, nbest=2)
    for hyps, plain_hyps, phrases in zip(results, plain, asked):
        pieces = translator.tokenizer.encode_tgt(list(phrases)) if phrases else []
        assert all(contains(h.tokens, p) and not h.relaxed and not h.unmet for h in hyps for p in pieces)
        if not phrases:  # a line without a term is searched exactly as without the glossary
            assert as_tuples([hyps]) == as_tuples([plain_hyps])
    assert any(as_tuples([r]) != as_tuples([p]) for r, p in zip(results, plain))  # the glossary changed something


def test_cased_terms_match_only_as_written(translator):
    glossary = Glossary([Term("Cat", "dog", cased=True), Term("sat", "home")])
    asked = [s.texts if s else () for _, s in steered(LINES, translator.tokenizer, None, None, glossary)]
    assert asked == [("home",), (), (), ("dog",), (), ()]


def test_an_empty_glossary_or_one_no_line_holds_changes_nothing(tiny, translator):
    plain = as_tuples(translator.translate(LINES, nbest=2))
    assert as_tuples(translator.translate(LINES, nbest=2, glossary=Glossary())) == plain
    assert as_tuples(translator.translate(LINES, nbest=2, glossary=Glossary([Term("zebra", "dog")]))) == plain


def test_terms_merge_with_the_callers_constraints(tiny, monkeypatch):
    """The terms join the caller's phrases (each asked once), marked to end a word; with no piece that continues a
    word and the glossary's beam that of constraints (10), the search is that of the same phrases given as
    constraints."""
    translator = Translator.from_checkpoint(
        tiny["checkpoint"], device="cpu", beam_size=3, max_len_b=10, glossary_beam_size=10
    )
    glossary = Glossary.load(tiny["terms"])
    constraints = [["dog"], ["house"], [], [], ["mat"], []]
    items = list(steered(LINES, translator.tokenizer, None, constraints, glossary))
    asked = [s.texts if s else () for _, s in items]
    assert asked == [("dog",), ("house",), (), ("dog",), ("mat", "red"), ("big",)]  # "dog" asked once
    assert [s.words if s else () for _, s in items] == [(False,), (False,), (), (True,), (False, True), (True,)]
    none = lambda tokenizer: torch.zeros(tokenizer.tgt_vocab_size, dtype=torch.bool)  # noqa: E731
    monkeypatch.setattr(streaming, "word_continuations", none)
    both = translator.translate(LINES, constraints=constraints, glossary=glossary)
    assert both == translator.translate(LINES, constraints=[list(a) for a in asked])


def test_terms_stand_as_whole_words(tiny, translator):
    """Where a hypothesis meets a term, the next piece begins a word (or is punctuation, or there is none): never a
    piece that continues the term's last word; the same phrase asked as a caller's constraint is continued on this
    model ("dogyy..."), so the rule is what keeps the terms whole."""
    glossary = Glossary.load(tiny["terms"])
    continuing = word_continuations(translator.tokenizer).tolist()
    continued = {}
    for name, call in (("term", dict(glossary=glossary)), ("caller", dict(constraints=CALLERS))):
        continued[name] = 0
        for hyps, phrases in zip(translator.translate(LINES, nbest=3, **call), CALLERS):
            for hyp, ids in itertools.product(hyps, translator.tokenizer.encode_tgt(phrases)):
                after = _after_meeting(hyp.tokens, ids)
                continued[name] += after is not None and continuing[after]
    assert continued["term"] == 0 and continued["caller"] > 0, continued


CALLERS = [["dog"], [], [], ["dog"], ["red"], ["big"]]  # the phrases the terms file asks of LINES


def _after_meeting(tokens: list[int], phrase: list[int]) -> int | None:
    """The piece after the first occurrence of `phrase` in `tokens` (where one phrase is met), None at the end."""
    for i in range(len(tokens) - len(phrase) + 1):
        if tokens[i : i + len(phrase)] == phrase:
            return tokens[i + len(phrase)] if i + len(phrase) < len(tokens) else None
    raise AssertionError(f"{phrase} not in {tokens}")


def test_terms_that_cannot_fit_are_relaxed_reported_and_the_line_translated(tiny, caplog):
    t = Translator.from_checkpoint(tiny["checkpoint"], device="cpu", beam_size=3, max_len_a=0, max_len_b=4)
    glossary = Glossary([Term("cat", "slowly quickly"), Term("dog", "big")])
    with caplog.at_level(logging.WARNING):
        results = t.translate(["the cat", "a dog"], nbest=2, glossary=glossary)
    plain = t.translate(["the cat"], nbest=2)
    assert all(h.relaxed == ("constraints",) and h.unmet == ("slowly quickly",) for h in results[0])
    assert [h.tokens for h in results[0]] == [h.tokens for h in plain[0]] and results[0][0].text is not None
    assert all(h.relaxed == () and contains(h.tokens, t.tokenizer.encode_tgt(["big"])[0]) for h in results[1])
    assert "line 1: the constraints need at least" in caplog.text and "line 2" not in caplog.text


def test_the_translators_glossary_and_a_calls(tiny):
    t = Translator.from_checkpoint(tiny["checkpoint"], device="cpu", beam_size=3, max_len_b=10, glossary=tiny["terms"])
    plain = Translator.from_checkpoint(tiny["checkpoint"], device="cpu", beam_size=3, max_len_b=10)
    with_file = plain.translate(LINES, glossary=str(tiny["terms"]))
    assert t.translate(LINES) == with_file == plain.translate(LINES, glossary=Glossary.load(tiny["terms"]))
    assert t.translate(LINES, glossary=Glossary()) == plain.translate(LINES)  # an empty one: none for this call
    assert t.with_decode(beam_size=2).glossary is t.glossary
    greedy = Translator.from_checkpoint(tiny["checkpoint"], beam_size=1, max_len_b=10, glossary=tiny["terms"])
    with pytest.raises(UserError, match="a glossary's terms \\(constraints\\) need beam search"):
        greedy.translate(LINES)
    assert greedy.translate(LINES, glossary=Glossary()) == plain.with_decode(beam_size=1).translate(LINES)
    with pytest.raises(UserError, match="glossary file not found"):
        Translator.from_checkpoint(tiny["checkpoint"], glossary="no-such.tsv")


def test_lines_of_terms_only_get_the_glossary_beam(tiny, monkeypatch):
    """Each line is searched with its beam: a line whose constraints are glossary terms only with max(beam,
    glossary_beam_size), one with a caller's phrase too with max(beam, constraint_beam_size), one without any with
    the beam; glossary_beam_size 1 leaves the terms' lines at the beam."""
    widths = {}
    search = streaming.StreamingEngine._translate_batch

    def recording(self, sources, layer=None, lines=None, settings=None):
        widths.update((line.number, settings.beam_size) for line in lines)
        return search(self, sources, layer, lines, settings)

    monkeypatch.setattr(streaming.StreamingEngine, "_translate_batch", recording)
    glossary, constraints = Glossary.load(tiny["terms"]), [["mat"], [], [], [], [], ["cat"]]
    for glossary_beam, terms_width in ((5, 5), (1, 3)):
        t = Translator.from_checkpoint(
            tiny["checkpoint"], beam_size=3, max_len_b=10, glossary_beam_size=glossary_beam, constraint_beam_size=7
        )
        widths.clear()
        t.translate(LINES, constraints=constraints, glossary=glossary)
        assert widths == {1: 7, 2: 3, 4: terms_width, 5: terms_width, 6: 7}  # line 3 is empty: not searched


# ------------------------------------------------------------------------------------------------- the command


def run(capsys, *argv):
    code = translate_main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out.split("\n")[:-1], err


def test_cli_glossary_alone_and_with_a_constraints_file(tiny, translator, capsys, tmp_path):
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    constraints = [["house"], [], [], [], ["mat"], []]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(c) for c in constraints) + "\n", encoding="utf-8")
    common = ["--checkpoint", tiny["checkpoint"], "--device", "cpu", "--input", tmp_path / "in.txt", "--beam", 3]
    common += ["--max-len-b", 10, "--glossary", tiny["terms"]]
    glossary = Glossary.load(tiny["terms"])
    code, out, err = run(capsys, *common)
    assert code == 0 and out == translator.translate(LINES, glossary=glossary), err
    code, out, err = run(capsys, *common, "--constraints-file", tmp_path / "c.jsonl")
    assert code == 0 and out == translator.translate(LINES, constraints=constraints, glossary=glossary), err
    code, out, err = run(capsys, *common, "--glossary-beam", 2)
    narrow = Translator.from_checkpoint(
        tiny["checkpoint"], device="cpu", beam_size=3, max_len_b=10, glossary_beam_size=2
    )
    assert code == 0 and out == narrow.translate(LINES, glossary=glossary), err  # 2: the beam, 3
    assert out != translator.translate(
        LINES, glossary=glossary
    )  # the glossary beam 4 (the default) gives other outputs


@pytest.mark.parametrize(
    "data, message",
    [
        (None, "glossary file not found: "),
        ("cat\tdog\nsmall cat red\n", "terms.tsv line 2: 1 column(s)"),
        ("cat\tdog\n\t\tcased\n", "terms.tsv line 2: the source term is empty"),
        ("cat\t\n", "terms.tsv line 1: the target term is empty"),
        (b"cat\tdog\n\xff\xfe\tx\n", "terms.tsv line 2 is not valid UTF-8"),
    ],
)
def test_cli_bad_glossary_files_are_one_line_and_exit_2(tiny, capsys, tmp_path, data, message):
    path = tmp_path / "terms.tsv"
    if data is not None:
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    code, out, err = run(capsys, "--checkpoint", tiny["checkpoint"], "--glossary", path, "the cat")
    assert code == 2 and not out and err.count("\n") == 1 and message in err and "Traceback" not in err


def test_cli_glossary_on_a_document(tiny, capsys, tmp_path):
    pytest.importorskip("sentencex")
    (tmp_path / "doc.txt").write_text("the cat sat on the mat.\n\na dog ran home.\n", encoding="utf-8")
    argv = ["--checkpoint", tiny["checkpoint"], "--device", "cpu", "--beam", 3, "--max-len-b", 10]
    code, out, err = run(
        capsys, *argv, "--format", "text", "--input", tmp_path / "doc.txt", "--glossary", tiny["terms"]
    )
    assert code == 0 and "dog" in out[0], err
