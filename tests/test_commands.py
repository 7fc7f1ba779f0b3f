"""transformer-translate and transformer-evaluate end to end on a tiny checkpoint (commands.py and cli.py)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_checkpoint

from transformer.commands.cli import evaluate_main, translate_main
from transformer.data.corpus import read_lines
from transformer.evaluation import corpus_scores

LONG = " ".join(["cat dog house"] * 20)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    return tiny_checkpoint.build(tmp_path_factory.mktemp("tiny"))


def translate(capsys, *argv) -> tuple[int, list[str], str]:
    code = translate_main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_translate_keeps_lines_and_order(tiny, tmp_path, capsys, caplog):
    lines = read_lines(tiny["src"])[:3]
    inputs = [lines[0], "", "  \t", lines[1], LONG, lines[2]]
    (tmp_path / "in.txt").write_text("\n".join(inputs) + "\n", encoding="utf-8")
    code, out, err = translate(capsys, "--checkpoint", tiny["checkpoint"], "--input", tmp_path / "in.txt")
    assert code == 0 and len(out) == 6
    assert out[1] == out[2] == "" and all(out[i] for i in (0, 3, 4, 5))
    assert "line 5: " in caplog.text and "truncated" in caplog.text  # on stderr outside pytest (see the pipe test)
    code, args_out, _ = translate(capsys, "--checkpoint", tiny["checkpoint"], lines[1], lines[0])
    assert args_out == [out[3], out[0]]


def test_translate_stdin_output_file_and_nbest(tiny, tmp_path, capsys, monkeypatch):
    lines = read_lines(tiny["src"])[:2]
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{lines[0]}\n\n{lines[1]}\n"))
    code, _, _ = translate(capsys, "--checkpoint", tiny["checkpoint"], "--output", tmp_path / "out.txt")
    assert code == 0 and len(read_lines(tmp_path / "out.txt")) == 3
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{lines[0]}\n{lines[1]}\n"))
    code, out, _ = translate(capsys, "--checkpoint", tiny["checkpoint"], "--beam", 3, "--nbest", 3)
    assert code == 0 and len(out) == 6
    fields = [line.split(" ||| ") for line in out]
    assert [f[0] for f in fields] == ["0", "0", "0", "1", "1", "1"]
    scores = [float(f[2]) for f in fields[:3]]
    assert scores == sorted(scores, reverse=True)


def test_translate_script_in_a_pipe(tiny):
    """scripts/translate.py reading stdin through a real pipe, output line for line, warnings on stderr."""
    script = Path(__file__).parents[1] / "scripts" / "translate.py"
    text = f"the cat\n\nsat on the mat\n{LONG}\n"
    run = subprocess.run(
        [sys.executable, str(script), "--checkpoint", str(tiny["checkpoint"]), "--threads", "1"],
        input=text,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("\n") == 4 and run.stdout.splitlines()[1] == ""
    assert "line 4: " in run.stderr and "truncated" in run.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--checkpoint", "missing.pt", "hello"], "checkpoint not found: missing.pt"),
        (["--checkpoint", "{ckpt}", "--input", "missing.txt"], "input file not found: missing.txt"),
        (["--checkpoint", "{ckpt}", "--precision", "fp16", "--device", "cpu", "x"], "needs a CUDA device"),
        (["--checkpoint", "{ckpt}", "--set", "model.d_model=32", "x"], "cannot change model.d_model"),
        (["--checkpoint", "{ckpt}", "--beam", "2", "--nbest", "3", "x"], "decode.nbest must be in [1, beam_size]"),
    ],
)
def test_translate_errors_exit_2(tiny, capsys, argv, message):
    code, out, err = translate(capsys, *[a.replace("{ckpt}", str(tiny["checkpoint"])) for a in argv])
    assert code == 2 and out == []
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_evaluate_the_config_test_split(tiny, tmp_path, capsys):
    code = evaluate_main(["--checkpoint", str(tiny["checkpoint"]), "--json", str(tmp_path / "s.json"), "--tok-bleu"])
    out = capsys.readouterr().out
    assert code == 0
    hyp_file = tiny["checkpoint"].parent / "checkpoint.test.hyp"
    hypotheses = read_lines(hyp_file)
    expected = corpus_scores(hypotheses, read_lines(tiny["ref"]), tok_bleu=True)
    record = json.loads((tmp_path / "s.json").read_text())
    assert record["bleu"] == expected["bleu"] and record["tok_bleu"] == expected["tok_bleu"]
    assert record["checkpoint"] == str(tiny["checkpoint"]) and record["hypotheses"] == str(hyp_file)
    assert record["decode"]["beam_size"] == 2 and "config data.test" in record["test_set"]
    for text in (
        "checkpoint:",
        "test set:",
        "config data.test:",
        "12 sentences",
        "decoding:",
        "beam 2",
        "BLEU ",
        "tok:13a",
        "chrF2 ",
        "not comparable to sacreBLEU",
    ):
        assert text in out


def test_evaluate_precedence_src_ref_and_hyp(tiny, tmp_path, capsys):
    """--set overrides the checkpoint's config, an explicit flag overrides --set; --hyp scores without a model."""
    config = tmp_path / "c.yaml"
    config.write_text("decode: {beam_size: 3, alpha: 1.0}\n", encoding="utf-8")
    argv = [
        "--checkpoint",
        str(tiny["checkpoint"]),
        "--src",
        str(tiny["src"]),
        "--ref",
        str(tiny["ref"]),
        "--config",
        str(config),
        "--set",
        "decode.beam_size=4",
        "--beam",
        "1",
        "--output",
        str(tmp_path / "h"),
        "--json",
        str(tmp_path / "s.json"),
    ]
    assert evaluate_main(argv) == 0
    record = json.loads((tmp_path / "s.json").read_text())
    assert (record["decode"]["beam_size"], record["decode"]["alpha"]) == (1, 1.0)
    assert "greedy" in capsys.readouterr().out
    assert evaluate_main(["--hyp", str(tmp_path / "h"), "--ref", str(tiny["ref"]), "--json", str(tmp_path / "t")]) == 0
    assert json.loads((tmp_path / "t").read_text())["bleu"] == record["bleu"]


def test_evaluate_errors_exit_2(tiny, tmp_path, capsys):
    short = tmp_path / "short.txt"
    short.write_text("one line\n", encoding="utf-8")
    cases = [
        (["--checkpoint", "missing.pt"], "checkpoint not found"),
        (["--hyp", str(short), "--ref", str(tiny["ref"])], "has 1 lines but"),
        (["--checkpoint", str(tiny["checkpoint"]), "--split", "valid"], "no data.valid split"),
        (["--checkpoint", str(tiny["checkpoint"]), "--src", str(tmp_path / "nope")], "--src and --ref go together"),
    ]
    for argv, message in cases:
        assert evaluate_main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_output_dash_is_standard_output_and_progress_counts_sentences(tiny, tmp_path, capsys):
    lines = read_lines(tiny["src"])
    code, out, _ = translate(capsys, "--checkpoint", tiny["checkpoint"], "--output", "-", lines[0], "", lines[1])
    assert code == 0 and len(out) == 3 and out[1] == "" and not (Path.cwd() / "-").exists()
    from transformer.checkpoint import load_for_inference
    from transformer.decoding.streaming import StreamingEngine

    model, tokenizer, config = load_for_inference(tiny["checkpoint"], "cpu")
    translator = StreamingEngine(model, tokenizer, config.decode.__class__(beam_size=1, max_tokens=20))
    counts: list[int] = []
    results = list(translator.translate([*lines, ""], chunk_lines=1000, progress=counts.append))
    assert len(results) == len(lines) + 1 and sum(counts) == len(lines) + 1
    assert len(counts) > 2  # one chunk, yet the count moves batch by batch, not once at its end
    code = evaluate_main(["--checkpoint", str(tiny["checkpoint"]), "--output", "-", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0 and "BLEU" in err and "BLEU" not in out  # the report goes to stderr, stdout has hypotheses
    assert evaluate_main(["--checkpoint", str(tiny["checkpoint"]), "--output", str(tmp_path / "h"), "--quiet"]) == 0
    assert out.splitlines() == read_lines(tmp_path / "h")


@pytest.mark.parametrize(
    "command", ["prepare", "train", "translate", "evaluate", "score", "average", "export", "serve", "keys"]
)
def test_help_shows_defaults_examples_and_where_config_keys_are(command, capsys):
    from transformer.commands.cli import main

    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and "examples:\n  transformer-" in out and "transformer/config/sections.py" in out
    out = " ".join(out.split())
    if command in ("translate", "evaluate", "score"):
        assert "(default: auto)" in out  # --device
    if command == "average":
        assert "(default: 5)" in out  # --last


def test_interactive_terminal_gets_a_prompt_and_no_bar(tiny):
    """stdin on a terminal: a prompt on stderr before each line, each translation as soon as its line is typed."""
    import os
    import pty

    master, slave = pty.openpty()
    command = [sys.executable, "-m", "transformer", "translate", "--checkpoint", str(tiny["checkpoint"])]
    process = subprocess.Popen(
        command,
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    os.close(slave)
    try:
        lines = read_lines(tiny["src"])[:2]
        os.write(master, (lines[0] + "\n").encode())
        first = process.stdout.readline()  # answered before the next line is typed
        os.write(master, (lines[1] + "\n").encode() + b"\x04")  # Ctrl-D ends the input
        rest, err = process.communicate(timeout=120)
    finally:
        os.close(master)
    assert process.returncode == 0 and first.strip() and len(rest.splitlines()) == 1
    assert "type a sentence" in err and err.count("> ") == 3 and "line/s" not in err and "it/s" not in err


def test_evaluate_refuses_to_write_over_a_file_of_any_corpus(tmp_path):
    """The outputs-are-not-inputs check covers every kind's files, a `corpora:` list's included."""
    import argparse

    from transformer.commands.evaluate import _check_outputs
    from transformer.config import Config, DataConfig, SplitConfig
    from transformer.errors import UserError

    tsv = tmp_path / "b.tsv"
    tsv.write_text("x\ty\n")
    test = SplitConfig(
        corpora=[SplitConfig(src=str(tmp_path / "a.en"), tgt=str(tmp_path / "a.de")), SplitConfig(tsv=str(tsv))]
    )
    config = Config(data=DataConfig(test=test))
    args = argparse.Namespace(checkpoint=None, config=None, src=None, ref=None, test_set=None, split="test", json=None)
    with pytest.raises(UserError, match="is the same file as data.test"):
        _check_outputs(args, config, tsv)
    _check_outputs(args, config, tmp_path / "h.txt")  # any other path is fine
