"""Scores against the sacrebleu command line, the paper-style tokenized BLEU, and test-set errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from transformer.errors import UserError
from transformer.evaluation import TOK_BLEU_LABEL, compound_split, corpus_scores, sacrebleu_test_set

REFS = [
    "The cat sat on the mat.",
    "A well-known state-of-the-art model.",
    "It rains today, doesn't it?",
    "Kosten-Nutzen-Analyse für 2-3 Jahre.",
    "Short.",
]
HYPS = [
    "The cat sat on a mat.",
    "A well-known model of the art.",
    "It rains today, isn't it?",
    "Kosten-Nutzen Analyse für 2-3 Jahre.",
    "",
]


def test_bleu_and_chrf_equal_the_sacrebleu_command_line(tmp_path):
    (tmp_path / "hyp").write_text("\n".join(HYPS) + "\n", encoding="utf-8")
    (tmp_path / "ref").write_text("\n".join(REFS) + "\n", encoding="utf-8")
    scores = corpus_scores(HYPS, REFS)
    for metric, key in (("bleu", "bleu"), ("chrf", "chrf")):
        command = [
            sys.executable,
            "-m",
            "sacrebleu",
            str(tmp_path / "ref"),
            "-i",
            str(tmp_path / "hyp"),
            "-m",
            metric,
            "-b",
            "-w",
            "4",
        ]
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


# --------------------------------------------------------------------------- sacreBLEU's options and paired tests

REF2 = [
    "The cat sat on the mat.",
    "A famous state-of-the-art model.",
    "It is raining today, isn't it?",
    "Kosten-Nutzen-Analyse für zwei bis drei Jahre.",
    "Short!",
]
HYPS_B = [
    "the cat sat on the mat.",
    "A well-known state of the art model.",
    "It rains today, doesn't it?",
    "Kosten-Nutzen-Analyse für 2-3 Jahre.",
    "Short.",
]


def _files(tmp_path, **texts) -> dict[str, str]:
    for name, lines in texts.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {name: str(tmp_path / name) for name in texts}


def _sacrebleu(*args: str, stdin: str | None = None) -> str:
    command = [sys.executable, "-m", "sacrebleu", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True, input=stdin).stdout


@pytest.mark.parametrize(
    "options, cli",
    [
        ({"metrics": ["ter"]}, ["-m", "ter"]),
        ({"metrics": ["chrf"], "chrf_word_order": 2}, ["-m", "chrf", "--chrf-word-order", "2"]),
        ({"metrics": ["bleu", "chrf"], "lowercase": True}, ["-m", "bleu", "chrf", "-lc", "--chrf-lowercase"]),
        ({"metrics": ["bleu"], "tokenize": "intl"}, ["-m", "bleu", "--tokenize", "intl"]),
        ({"metrics": ["bleu"], "tokenize": "char"}, ["-m", "bleu", "--tokenize", "char"]),
    ],
)
def test_metrics_and_options_equal_the_sacrebleu_command_line(options, cli, tmp_path):
    from transformer.evaluation import score_systems

    files = _files(tmp_path, hyp=HYPS, ref=REFS, ref2=REF2)
    for refs in (["ref"], ["ref", "ref2"]):  # one reference, then multi-reference
        record = score_systems({"hyp": HYPS}, [REFS, REF2][: len(refs)], **options)
        expected = json.loads(
            "["
            + _sacrebleu(*[files[r] for r in refs], "-i", files["hyp"], *cli, "-f", "json", "-w", "4").replace(
                "}\n{", "},{"
            )
            + "]"
        )
        expected = expected if isinstance(expected[0], dict) else expected[0]
        ours = record["systems"][0]["scores"]
        assert [e["name"] for e in expected] == list(ours)
        for item in expected:
            assert round(ours[item["name"]]["score"], 4) == pytest.approx(item["score"], abs=1e-4)
            assert ours[item["name"]]["signature"] == item["signature"]
        assert record["references"] == len(refs)


@pytest.mark.parametrize("test_type", ["bs", "ar"])
def test_paired_significance_prints_what_sacrebleu_prints(test_type, tmp_path, capsys):
    """Two systems against two references: our table (through sacreBLEU's PairedTest) equals the CLI's output."""
    from transformer.commands.cli import evaluate_main

    files = _files(tmp_path, a=HYPS, b=HYPS_B, ref=REFS, ref2=REF2)
    n = {"bs": "100", "ar": "200"}[test_type]
    cli = _sacrebleu(
        files["ref"],
        files["ref2"],
        "-i",
        files["a"],
        files["b"],
        "-m",
        "bleu",
        "chrf",
        "ter",
        "--chrf-word-order",
        "2",
        f"--paired-{test_type}",
        f"--paired-{test_type}-n",
        n,
        "-f",
        "text",
        "--no-color",
    )
    argv = [
        "--hyp",
        files["a"],
        files["b"],
        "--ref",
        files["ref"],
        files["ref2"],
        "--metrics",
        "bleu",
        "chrf",
        "ter",
        "--chrf-word-order",
        "2",
        f"--paired-{test_type}",
        "--paired-n",
        n,
        "--json",
        str(tmp_path / "s.json"),
    ]
    assert evaluate_main(argv) == 0
    out = capsys.readouterr().out
    assert cli.strip() in out and "Metric signatures" in out and "chrF2++" in out
    record = json.loads((tmp_path / "s.json").read_text())
    assert record["paired_test"] == {"type": test_type, "n": int(n), "baseline": files["a"]}
    second = record["systems"][1]["scores"]
    assert set(second) == {"BLEU", "chrF2++", "TER"} and all(0 < s["p_value"] <= 1 for s in second.values())
    assert f"nrefs:2|{test_type}:{n}|" in second["BLEU"]["signature"] and record["references"] == 2


def test_stdin_and_json_to_stdout(tmp_path, monkeypatch, capsys):
    import io

    from transformer.commands.cli import evaluate_main

    files = _files(tmp_path, ref=REFS)
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(HYPS) + "\n"))
    assert evaluate_main(["--hyp", "-", "--ref", files["ref"], "--metrics", "bleu", "ter", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    record = json.loads(out)  # standard output holds the JSON alone; the report went to stderr
    expected = corpus_scores(HYPS, REFS)
    assert record["bleu"] == expected["bleu"] and "ter" in record and "chrf" not in record
    assert "BLEU" in err and "TER" in err
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(REFS) + "\n"))
    assert evaluate_main(["--hyp", "-", "--ref", "-"]) == 2
    assert "only one of --hyp and --ref" in capsys.readouterr().err


def test_paper_tokenizer_is_labelled():
    from transformer.evaluation import paper_tokenizer, tokenized_bleu

    tokenize, name = paper_tokenizer("en")
    try:
        import sacremoses  # noqa: F401

        assert name.startswith("Moses tokens (sacremoses") and tokenize("It's here.") == "It 's here ."
    except ImportError:
        assert name.startswith("13a tokens") and "pip install sacremoses" in name
    assert name in tokenized_bleu(HYPS, REFS, "en")[1]


def test_missing_tokenizer_extra_is_a_user_error():
    from transformer.evaluation import make_metrics

    try:
        import MeCab  # noqa: F401
    except ImportError:
        with pytest.raises(UserError, match="pip install sacrebleu\\[ja\\]"):
            make_metrics(["bleu"], [REFS], tokenize="ja-mecab")["bleu"].corpus_score(HYPS, None)
