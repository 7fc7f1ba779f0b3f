"""Protected spans through the Python API and transformer-translate's lines, on the tiny checkpoint: each span
exactly once in every hypothesis, said in each `Translation`; alignments of the restored text; protection off
gives the engine's own output; the command's --protect, --no-protect-numbers and --no-protect."""

from __future__ import annotations

import pytest
from tiny_checkpoint import build

from transformer import Translator
from transformer.commands.cli import translate_main
from transformer.documents.spans import Protection

LINES = ["the cat %s sat on https://x.org/a", "the dog ran", "%s: %d", "", "the %(name)s ran 42 home ZX-9"]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return build(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def translator(paths):
    return Translator.from_checkpoint(paths["checkpoint"], beam_size=3)


def test_every_hypothesis_keeps_each_span_once_and_says_which(translator):
    results = translator.translate(LINES, nbest=3)
    for line, hypotheses in zip(LINES, results):
        for hypothesis in hypotheses:
            for span in ("%s", "https://x.org/a", "%d", "%(name)s", "42"):
                assert hypothesis.text.count(span) == line.count(span), (line, hypothesis.text)
    assert [k for k, _ in results[0][0].protected] == ["placeholder", "url"] and results[1][0].protected == ()
    assert results[2][0].text == "%s: %d" and results[2][0].tokens == []  # only placeholders: not translated
    assert results[3][0].text == ""


def test_alignments_are_those_of_the_restored_text(translator):
    for line, result in zip(LINES, translator.translate(LINES, alignment=True)):
        source_words, target_words = len(line.split()), len(result.text.split())
        assert all(0 <= s < source_words and 0 <= t < target_words for s, t in result.alignment)


def test_protection_off_is_the_engine_as_it_was_and_patterns_are_added(translator):
    plain = translator.translate(LINES, protect=False)
    assert plain[1] == translator.translate(LINES)[1]  # a line without spans: the same either way
    assert not any("https://x.org/a" in text for text in plain)  # the untrained model keeps none of it
    with_pattern = translator.translate(LINES[4:], protect=Protection(patterns=(r"ZX-\d",)))[0]
    assert "ZX-9" in with_pattern and "42" in with_pattern
    assert "42" not in translator.translate(LINES[4:], protect=Protection(numbers=False))[0]


def test_the_command_keeps_spans_and_its_switches_work(paths, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    base = ["--checkpoint", str(paths["checkpoint"]), "--input", str(source), "--quiet"]
    assert translate_main(base + ["--protect", r"ZX-\d"]) == 0
    out = capsys.readouterr().out.split("\n")
    assert len(out) == len(LINES) + 1 and "https://x.org/a" in out[0] and out[2] == "%s: %d" and "ZX-9" in out[4]
    assert translate_main(base + ["--no-protect"]) == 0
    assert "https://x.org/a" not in capsys.readouterr().out
