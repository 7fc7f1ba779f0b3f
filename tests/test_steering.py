"""Prefixes, constraints and n-gram blocking through the Python API and transformer-translate (decoding/steering.py),
on the tiny checkpoint: with n-best, alignments, ensembles and empty lines; bad inputs give one line and exit 2."""

from __future__ import annotations

import json
import logging
import re

import pytest
import tiny_checkpoint

from transformer import Translator, UserError
from transformer.commands.cli import translate_main
from transformer.data.corpus import read_lines

LINES = ["the cat sat on the mat", "a dog ran home", "", "the old red house"]
PREFIXES = ["a small", "", "", "the"]
CONSTRAINTS = [["big dog"], [], ["cat"], ["house", "slowly"]]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_checkpoint.build(tmp_path_factory.mktemp("steer"))


def starts_with(tokens, prefix) -> bool:
    return tokens[: len(prefix)] == prefix


def contains(tokens, phrase) -> bool:
    return any(tokens[i : i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


@pytest.mark.parametrize("beam", [1, 3])
def test_every_output_starts_with_its_prefix_and_free_lines_are_unchanged(tiny, beam):
    t = Translator.from_checkpoint(tiny["checkpoint"], device="cpu", beam_size=beam, max_len_b=10)
    lines = read_lines(tiny["src"])
    prefixes = [["a small", "the", "house", ""][i % 4] for i in range(len(lines))]
    results = t.translate(lines, nbest=beam, prefix=prefixes)
    plain = t.translate(lines, nbest=beam)
    for hyps, plain_hyps, prefix in zip(results, plain, prefixes):
        pieces = t.tokenizer.encode_tgt([prefix])[0]
        assert all(starts_with(h.tokens, pieces) for h in hyps)
        assert prefix or [h.tokens for h in hyps] == [h.tokens for h in plain_hyps]


def test_constraints_with_nbest_alignments_and_an_ensemble(tiny):
    """Every hypothesis of every line contains its phrases; alignments still come; an ensemble of a model with
    itself decodes the same; the empty line stays empty."""
    t = Translator.from_checkpoint(tiny["checkpoint"], device="cpu", beam_size=4, max_len_b=12)
    results = t.translate(LINES, nbest=2, constraints=CONSTRAINTS, prefix=PREFIXES, alignment=True)
    for hyps, phrases, prefix in zip(results, CONSTRAINTS, PREFIXES):
        if not hyps[0].tokens:  # the empty line
            continue
        for h in hyps:
            assert all(contains(h.tokens, p) for p in t.tokenizer.encode_tgt(phrases))
            assert starts_with(h.tokens, t.tokenizer.encode_tgt([prefix])[0] if prefix else [])
            assert h.alignment
    assert results[2][0].text == ""
    ensemble = Translator.from_checkpoint([tiny["checkpoint"]] * 2, device="cpu", beam_size=4, max_len_b=12)
    same = ensemble.translate(LINES, nbest=2, constraints=CONSTRAINTS, prefix=PREFIXES)
    assert [[h.tokens for h in hyps] for hyps in same] == [[h.tokens for h in hyps] for hyps in results]


def test_lines_with_constraints_are_searched_with_the_wider_beam_and_free_lines_as_before(tiny):
    """At beam 3 with constraint_beam_size 6, the lines with constraints decode as a beam-6 search of them alone,
    the free lines (with or without a prefix) of the same call as a beam-3 search; n-best stays 2; with
    constraint_beam_size 1 the constrained lines get beam 3."""
    lines = read_lines(tiny["src"])[:8] + LINES
    constraints = [["cat"], [], ["dog"], []] * 2 + CONSTRAINTS
    prefixes = ["", "the", "", ""] * 2 + PREFIXES
    steered = [i for i, c in enumerate(constraints) if c]
    for wide, beam_of_steered in ((6, 6), (1, 3)):
        t = Translator.from_checkpoint(
            tiny["checkpoint"], device="cpu", beam_size=3, max_len_b=12, constraint_beam_size=wide
        )
        got = t.translate(lines, nbest=2, constraints=constraints, prefix=prefixes)
        free = t.translate(lines, nbest=2, prefix=prefixes)
        alone = Translator.from_checkpoint(
            tiny["checkpoint"], device="cpu", beam_size=beam_of_steered, max_len_b=12, constraint_beam_size=1
        )
        wanted = alone.translate(
            [lines[i] for i in steered],
            nbest=2,
            constraints=[constraints[i] for i in steered],
            prefix=[prefixes[i] for i in steered],
        )
        assert all(len(hyps) == 2 for hyps, line in zip(got, lines) if line.strip())
        assert [tokens(got[i]) for i in steered] == [tokens(hyps) for hyps in wanted]
        assert all(tokens(got[i]) == tokens(free[i]) for i in range(len(lines)) if i not in steered)


def tokens(hyps) -> list[list[int]]:
    return [h.tokens for h in hyps]


def test_infeasible_constraints_are_reported(tiny, caplog):
    t = Translator.from_checkpoint(tiny["checkpoint"], device="cpu", beam_size=2, max_len_b=3, max_len_a=0)
    with caplog.at_level(logging.WARNING):
        [text] = t.translate(["the cat"], constraints=[["big red small old dog"]])
    assert "line 1: the constraints need" in caplog.text and "decoded without them" in caplog.text
    assert "reached the maximum output length" not in caplog.text  # reported once, before the search
    assert text == t.translate(["the cat"])[0]


@pytest.mark.parametrize(
    "call, message",
    [
        (dict(constraints=[["cat"]]), "need beam search"),
        (dict(prefix=["a", "b"]), "more prefix entries than the 1 input lines"),
        (dict(constraints=["cat"]), "give a list of phrases"),
    ],
)
def test_api_refusals(tiny, call, message):
    beam = 1 if "constraints" in call and call["constraints"] == [["cat"]] else 2
    t = Translator.from_checkpoint(tiny["checkpoint"], device="cpu", beam_size=beam)
    with pytest.raises(UserError, match=message):
        t.translate(["the cat"], **call)


def run(capsys, tmp_path, *argv):
    code = translate_main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out.split("\n")[:-1], err


def test_cli_prefix_constraints_blocking_and_nbest(tiny, capsys, tmp_path):
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    (tmp_path / "prefix.txt").write_text("\n".join(PREFIXES) + "\n", encoding="utf-8")
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps(c) for c in CONSTRAINTS) + "\n", encoding="utf-8")
    common = ["--checkpoint", tiny["checkpoint"], "--device", "cpu", "--input", tmp_path / "in.txt", "--beam", 4]
    steer = ["--prefix-file", tmp_path / "prefix.txt", "--constraints-file", tmp_path / "c.jsonl", "--max-len-b", 12]
    code, out, _ = run(capsys, tmp_path, *common, *steer, "--no-repeat-ngram-size", 2, "--constraint-beam", 5)
    api = Translator.from_checkpoint(
        tiny["checkpoint"], device="cpu", beam_size=4, max_len_b=12, no_repeat_ngram_size=2, constraint_beam_size=5
    )
    assert code == 0 and out == api.translate(LINES, prefix=PREFIXES, constraints=CONSTRAINTS)
    code, out, _ = run(capsys, tmp_path, *common, *steer, "--nbest", 2, "--alignment")
    assert code == 0 and len(out) == 7 and all(len(line.split(" ||| ")) == 4 for line in out)


@pytest.mark.parametrize(
    "content, message",
    [
        ('["cat"]\n[]\n', "constraints: none for input line 3"),
        ('["cat"]\n{"a": 1}\n[]\n[]\n', "line 2: not a JSON list of phrases"),
        ('["cat"\n', "line 1: not JSON"),
    ],
)
def test_cli_bad_constraints_file_exit_2(tiny, capsys, tmp_path, content, message):
    (tmp_path / "in.txt").write_text("the cat\na dog\nthe mat\nhome\n", encoding="utf-8")
    (tmp_path / "c.jsonl").write_text(content, encoding="utf-8")
    argv = ["--checkpoint", tiny["checkpoint"], "--device", "cpu", "--input", tmp_path / "in.txt", "--beam", 2]
    code, out, err = run(capsys, tmp_path, *argv, "--constraints-file", tmp_path / "c.jsonl")
    assert code == 2 and message in err and err.count("\n") == 1


def test_cli_missing_prefix_file_exit_2(tiny, capsys, tmp_path):
    code, _, err = run(capsys, tmp_path, "--checkpoint", tiny["checkpoint"], "--prefix-file", tmp_path / "no", "a")
    assert code == 2 and "--prefix-file: file not found" in err and err.count("\n") == 1


def test_a_prefix_that_holds_overlapping_phrases_and_a_tight_length_still_translates(tiny, caplog):
    """Prefix "the cat sat" holds "the cat" and "cat sat", but they share "cat": "cat sat" needs pieces of its own,
    more than the maximum length leaves. The feasibility check once counted both met and the search then ended with
    no hypothesis (an IndexError); now the line is decoded without them, says so, and names the phrase unmet."""
    t = Translator.from_checkpoint(tiny["checkpoint"], device="cpu", beam_size=3, max_len_a=0, max_len_b=8)
    pieces = t.tokenizer.encode_tgt(["the cat sat", "the cat", "cat sat"])
    assert pieces[0][: len(pieces[1])] == pieces[1] and pieces[0][-len(pieces[2]) :] == pieces[2]  # they overlap
    with caplog.at_level(logging.WARNING):
        [hyps] = t.translate(["a dog"], nbest=2, prefix=["the cat sat"], constraints=[["the cat", "cat sat"]])
    assert hyps and all(starts_with(h.tokens, pieces[0]) for h in hyps)
    assert all(h.relaxed == ("constraints",) and h.unmet == ("cat sat",) for h in hyps)
    assert "line 1: the constraints need at least" in caplog.text and "decoded without them" in caplog.text


def test_conflicting_controls_are_relaxed_and_reported_per_line(tiny, caplog):
    """Prefix "the the" under no_repeat_ngram_size 1: blocking forbade the prefix's second piece and the line had no
    hypothesis; now blocking is set aside for that line alone, with a warning naming it. Met constraints report
    nothing unmet; dropped ones name what the output lacks."""
    t = Translator.from_checkpoint(tiny["checkpoint"], device="cpu", beam_size=4, max_len_b=6, no_repeat_ngram_size=1)
    lines, prefixes = ["the cat", "a dog", "the mat"], ["the the", "", "a"]
    constraints = [[], ["dog"], ["big red small old dog house mat"]]
    with caplog.at_level(logging.WARNING):
        results = t.translate(lines, nbest=2, prefix=prefixes, constraints=constraints)
    the = t.tokenizer.encode_tgt(["the"])[0]
    assert all(starts_with(h.tokens, the + the) and h.relaxed == ("no_repeat_ngram_size",) for h in results[0])
    assert all(h.relaxed == () and h.unmet == () for h in results[1])
    assert all(h.relaxed == ("constraints",) and h.unmet == (constraints[2][0],) for h in results[2])
    assert "line 1: no translation met every control of the search: translated without repetition blocking" in (
        caplog.text
    )
    assert "line 2" not in caplog.text and "line 3: the constraints need" in caplog.text


def test_cli_warns_of_relaxed_lines_and_writes_every_line(tiny, capsys, tmp_path):
    (tmp_path / "in.txt").write_text("the cat\na dog\n", encoding="utf-8")
    (tmp_path / "prefix.txt").write_text("the the\n\n", encoding="utf-8")
    argv = ["--checkpoint", tiny["checkpoint"], "--device", "cpu", "--input", tmp_path / "in.txt", "--beam", 3]
    code, out, err = run(capsys, tmp_path, *argv, "--prefix-file", tmp_path / "prefix.txt", "--no-repeat-ngram-size", 1)
    assert code == 0 and len(out) == 2 and out[0].startswith("the the")
    assert "line 1: no translation met every control" in err and "line 2" not in err


def test_cli_constraints_nested_past_the_recursion_limit_exit_2(tiny, capsys, tmp_path):
    (tmp_path / "in.txt").write_text("the cat\n", encoding="utf-8")
    (tmp_path / "c.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n", encoding="utf-8")
    argv = ["--checkpoint", tiny["checkpoint"], "--device", "cpu", "--input", tmp_path / "in.txt", "--beam", 2]
    code, out, err = run(capsys, tmp_path, *argv, "--constraints-file", tmp_path / "c.jsonl")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "c.jsonl line 1: JSON nested too deep to read" in err


@pytest.mark.parametrize(
    "call, message",
    [
        (dict(constraints=[["\ud800"]]), "lone surrogate"),
        (dict(prefix=["a\udfff"]), "lone surrogate"),
        (dict(prefix=[None]), "prefix for input line 1: give a string"),
        (dict(constraints=[[["x"] * 50]]), "give a list of phrases (strings), got [['x', 'x', 'x', 'x', ...]]"),
    ],
)
def test_api_refuses_prefixes_and_phrases_that_are_not_text(tiny, call, message):
    t = Translator.from_checkpoint(tiny["checkpoint"], device="cpu", beam_size=2)
    with pytest.raises(UserError, match=re.escape(message)):
        t.translate(["the cat"], **call)
