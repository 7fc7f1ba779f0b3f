"""Scores against the sacrebleu command line, the paper-style tokenized BLEU, and test-set errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from transformer.errors import UserError
from transformer.evaluation import TOK_BLEU_LABEL, compound_split, corpus_scores, sacrebleu_test_set

REFS = ["The cat sat on the mat.", "A well-known state-of-the-art model.", "It rains today, doesn't it?",
        "Kosten-Nutzen-Analyse für 2-3 Jahre.", "Short."]  # fmt: skip
HYPS = ["The cat sat on a mat.", "A well-known model of the art.", "It rains today, isn't it?",
        "Kosten-Nutzen Analyse für 2-3 Jahre.", ""]  # fmt: skip


def test_bleu_and_chrf_equal_the_sacrebleu_command_line(tmp_path):
    (tmp_path / "hyp").write_text("\n".join(HYPS) + "\n", encoding="utf-8")
    (tmp_path / "ref").write_text("\n".join(REFS) + "\n", encoding="utf-8")
    scores = corpus_scores(HYPS, REFS)
    for metric, key in (("bleu", "bleu"), ("chrf", "chrf")):
        command = [sys.executable, "-m", "sacrebleu", str(tmp_path / "ref"), "-i", str(tmp_path / "hyp"),
                   "-m", metric, "-b", "-w", "4"]  # fmt: skip
        cli = float(subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip())
        assert round(scores[key], 4) == pytest.approx(cli, abs=1e-4)
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert scores["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:")
    assert scores["sentences"] == 5 and "tok_bleu" not in scores


def test_compound_split_like_the_perl_one_liner():
    assert compound_split("state-of-the-art") == "state ##AT##-##AT## of ##AT##-##AT## the ##AT##-##AT## art"
    assert compound_split("x-y-z") == "x ##AT##-##AT## y-z"  # matches do not overlap, as with perl's s///g
    assert compound_split("a - b, x- y, 2-3") == "a - b, x- y, 2 ##AT##-##AT## 3"


def test_tokenized_bleu_is_labelled_and_differs():
    scores = corpus_scores(HYPS, REFS, tok_bleu=True)
    assert scores["tok_bleu_label"] == TOK_BLEU_LABEL and "not comparable to sacreBLEU" in TOK_BLEU_LABEL
    assert 0 < scores["tok_bleu"] < 100 and scores["tok_bleu"] != pytest.approx(scores["bleu"])
    assert corpus_scores(REFS[:4], REFS[:4], tok_bleu=True)["tok_bleu"] == pytest.approx(100.0)


def test_mismatched_lengths_are_a_user_error():
    with pytest.raises(UserError, match="4 hypotheses but 5 references"):
        corpus_scores(HYPS[:4], REFS)


def test_test_set_errors(monkeypatch):
    from sacrebleu.dataset import DATASETS

    with pytest.raises(UserError, match="did you mean wmt14/full"):
        sacrebleu_test_set("wmt14/ful", "en-de")
    with pytest.raises(UserError, match="no language pair 'en-xx'"):
        sacrebleu_test_set("wmt14/full", "en-xx")

    def offline(langpair):
        sys.exit(1)  # what sacrebleu does when a download fails

    monkeypatch.setattr(DATASETS["wmt14/full"], "get_source_file", offline)
    with pytest.raises(UserError, match="internet.*--src F --ref F"):
        sacrebleu_test_set("wmt14/full", "en-de")
