"""The confidence on the command line, on the tiny checkpoint: transformer-translate's --confidence column (single
best and n-best), --min-confidence marking or emptying lines without ever changing their number (empty input lines
included), transformer-calibrate writing a calibrated copy whose threshold `--min-confidence auto` uses, an old
checkpoint without a calibration (the uncalibrated fallback, with a warning), and transformer-average calibrating
the average."""

from __future__ import annotations

import hashlib
import math

import pytest
import tiny_checkpoint
import torch

from transformer import Translator
from transformer.checkpoint import save_checkpoint
from transformer.commands.cli import average_main, calibrate_main, translate_main
from transformer.commands.translate import LOW_MARK

LINES = ["the cat sat", "", "a dog ran home", "", "the small house", "old"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("confidence")
    found = tiny_checkpoint.build(folder)
    (folder / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    (folder / "valid.src").write_text("\n".join(tiny_checkpoint.sentences(20, seed=3)) + "\n", encoding="utf-8")
    (folder / "valid.ref").write_text("\n".join(tiny_checkpoint.sentences(20, seed=4)) + "\n", encoding="utf-8")
    config = f"data:\n  valid: {{src: {folder / 'valid.src'}, tgt: {folder / 'valid.ref'}}}\n"
    (folder / "valid.yaml").write_text(config, encoding="utf-8")
    calibrated = folder / "calibrated.pt"
    argv = [
        "--checkpoint",
        str(found["checkpoint"]),
        "--config",
        str(folder / "valid.yaml"),
        "--output",
        str(calibrated),
    ]
    before = hashlib.sha256(found["checkpoint"].read_bytes()).hexdigest()
    assert calibrate_main([*argv, "--device", "cpu", "--quiet"]) == 0
    assert hashlib.sha256(found["checkpoint"].read_bytes()).hexdigest() == before  # --output: a copy
    state = torch.load(found["checkpoint"], weights_only=True)
    valid = {"src": str(folder / "valid.src"), "tgt": str(folder / "valid.ref")}
    state["config"]["data"]["valid"] = valid
    save_checkpoint(state, folder / "with_valid.pt")  # its own config names the validation split
    return {**found, "folder": folder, "calibrated": calibrated, "with_valid": folder / "with_valid.pt"}


def run(capsys, *argv: str) -> tuple[list[str], str]:
    assert translate_main([*argv, "--device", "cpu", "--quiet"]) == 0
    out, err = capsys.readouterr()
    return out.split("\n")[:-1], err


def best(checkpoint) -> list:
    return [hyps[0] for hyps in Translator.from_checkpoint(checkpoint).translate(LINES, nbest=1)]


def test_the_confidence_column_has_one_line_per_input_line(tiny, capsys):
    lines, _ = run(
        capsys, "--checkpoint", str(tiny["calibrated"]), "--input", str(tiny["folder"] / "in.txt"), "--confidence"
    )
    expected = best(tiny["calibrated"])
    assert len(lines) == len(LINES)
    assert [line.split("\t") for line in lines] == [[t.text, f"{t.confidence:.4f}"] for t in expected]
    assert lines[1] == lines[3] == "\t1.0000"  # an empty line: an exact, empty translation
    assert all(0 <= float(line.split("\t")[1]) <= 1 for line in lines)


@pytest.mark.parametrize("mode", ["mark", "empty"])
def test_min_confidence_marks_or_empties_lines_and_keeps_their_number(tiny, capsys, mode):
    expected = best(tiny["calibrated"])
    threshold = sorted(t.confidence for t, line in zip(expected, LINES) if line)[2]  # two real lines below it
    argv = ["--checkpoint", str(tiny["calibrated"]), "--input", str(tiny["folder"] / "in.txt")]
    lines, _ = run(capsys, *argv, "--min-confidence", str(threshold), "--low-confidence", mode)
    assert len(lines) == len(LINES)
    low = [t.confidence < threshold for t in expected]
    assert sum(low) == 2 and not low[1] and not low[3]
    shown = [(LOW_MARK + t.text if mode == "mark" else "") if below else t.text for t, below in zip(expected, low)]
    assert lines == shown


def test_nbest_lines_carry_the_confidence_after_the_score(tiny, capsys):
    argv = ["--checkpoint", str(tiny["calibrated"]), "--input", str(tiny["folder"] / "in.txt"), "--nbest", "2"]
    lines, _ = run(capsys, *argv, "--beam", "2", "--confidence", "--min-confidence", "1", "--low-confidence", "empty")
    results = Translator.from_checkpoint(tiny["calibrated"], beam_size=2).translate(LINES, nbest=2)
    expected = [
        f"{i} ||| {'' if h.confidence < 1 else h.text} ||| {h.score:.4f} ||| {h.confidence:.4f}"
        for i, hyps in enumerate(results)
        for h in hyps
    ]
    assert lines == expected and len(lines) == sum(len(hyps) for hyps in results)


def test_min_confidence_auto_uses_the_calibrated_threshold(tiny, capsys):
    threshold = Translator.from_checkpoint(tiny["calibrated"]).confidence_threshold
    stored = torch.load(tiny["calibrated"], weights_only=True)["confidence"]
    assert threshold == pytest.approx(stored["threshold"]) and 0 < threshold < 1
    argv = ["--checkpoint", str(tiny["calibrated"]), "--input", str(tiny["folder"] / "in.txt")]
    lines, err = run(capsys, *argv, "--min-confidence", "auto")
    expected = [LOW_MARK + t.text if t.confidence < threshold else t.text for t in best(tiny["calibrated"])]
    assert lines == expected and "warning" not in err


def test_an_old_checkpoint_without_calibration_gives_the_uncalibrated_confidence(tiny, capsys, caplog):
    lines, err = run(
        capsys, "--checkpoint", str(tiny["checkpoint"]), "--input", str(tiny["folder"] / "in.txt"), "--confidence"
    )
    warnings = [r.getMessage() for r in caplog.records if "no confidence calibration" in r.getMessage()]
    assert len(warnings) == 1 and "exp(mean log-probability per token)" in warnings[0]
    for line, t in zip(lines, best(tiny["checkpoint"])):
        geometric = math.exp(t.log_prob / (len(t.tokens) + 1)) if t.tokens or t.log_prob else 1.0
        assert line == f"{t.text}\t{geometric:.4f}"
    assert translate_main(["--checkpoint", str(tiny["checkpoint"]), "--min-confidence", "auto", "x"]) == 2
    assert "no confidence calibration" in capsys.readouterr().err


def test_average_calibrates_the_average_on_its_config(tiny, tmp_path, caplog):
    checkpoint, with_valid = str(tiny["checkpoint"]), str(tiny["with_valid"])
    assert (
        average_main(["--inputs", with_valid, with_valid, "--output", str(tmp_path / "a.pt"), "--device", "cpu"]) == 0
    )
    averaged = torch.load(tmp_path / "a.pt", weights_only=True)["confidence"]
    calibrated = torch.load(tiny["calibrated"], weights_only=True)["confidence"]  # the same weights, split, settings
    assert averaged["threshold"] == pytest.approx(calibrated["threshold"]) and averaged["about"] == calibrated["about"]
    assert average_main(["--inputs", with_valid, "--output", str(tmp_path / "b.pt"), "--no-calibrate"]) == 0
    assert "confidence" not in torch.load(tmp_path / "b.pt", weights_only=True)
    assert (
        average_main(["--inputs", checkpoint, checkpoint, "--output", str(tmp_path / "c.pt"), "--device", "cpu"]) == 0
    )
    assert "confidence" not in torch.load(tmp_path / "c.pt", weights_only=True)  # its config has no data.valid
    assert "no confidence calibration (the config has no data.valid split" in caplog.text


def test_the_native_api_answers_each_hypothesis_confidence_and_the_threshold(tiny):
    from transformer.serving.engine import Engine
    from transformer.serving.native import hypotheses, plan_native

    for checkpoint in (tiny["calibrated"], tiny["checkpoint"]):
        translator = Translator.from_checkpoint(checkpoint, beam_size=2)
        engine = Engine(translator)
        limits = dict(max_lines=8, max_chars=100, max_beam=4, max_len_a=2.0, max_len_b=50)
        lines, settings, controls = plan_native({"q": LINES, "nbest": 2}, engine.defaults, **limits)
        answer = hypotheses(engine.decode(settings, lines, controls), settings.alignment, engine.threshold)
        expected = translator.translate(LINES, nbest=2)
        got = [[h["confidence"] for h in hyps] for hyps in answer["translations"]]
        assert got == [[round(h.confidence, 4) for h in hyps] for hyps in expected]
        assert answer["confidence_threshold"] == (
            None if checkpoint == tiny["checkpoint"] else round(translator.confidence_threshold, 4)
        )
