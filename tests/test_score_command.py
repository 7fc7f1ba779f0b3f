"""transformer-score end to end on a tiny checkpoint (commands/score.py), and `--checkpoint A B` (an ensemble) in
transformer-translate and transformer-evaluate. The figures come from the Python API (`Translator.score`), which
tests/test_scoring.py checks against search and validation."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_checkpoint

from transformer import Translator
from transformer.commands.cli import evaluate_main, score_main, translate_main
from transformer.data.corpus import read_lines


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    paths = tiny_checkpoint.build(tmp_path_factory.mktemp("score"))
    paths["sibling"] = tiny_checkpoint.build_sibling(paths["checkpoint"], tmp_path_factory.mktemp("sib"), seed=7)
    return paths


def _files(folder: Path, sources: list[str], targets: list[str]) -> tuple[str, str]:
    (folder / "s.txt").write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    (folder / "t.txt").write_text("".join(line + "\n" for line in targets), encoding="utf-8")
    return str(folder / "s.txt"), str(folder / "t.txt")


def test_tsv_one_line_per_pair_in_order_with_the_apis_figures(tiny, tmp_path, capsys):
    sources, targets = read_lines(tiny["src"])[:4], read_lines(tiny["ref"])[:4]
    sources[2] = ""  # an empty source: not scored
    src, tgt = _files(tmp_path, sources, targets)
    assert score_main(["--checkpoint", str(tiny["checkpoint"]), "--src", src, "--tgt", tgt]) == 0
    out, err = capsys.readouterr()
    rows = [line.split("\t") for line in out.splitlines()]
    expected = Translator.from_checkpoint(tiny["checkpoint"]).score(sources, targets)
    assert [r for r in rows] == [
        [f"{s.log_prob:.4f}", f"{s.per_token:.4f}", f"{s.ppl:.4f}", str(s.tokens)] for s in expected
    ]
    assert rows[2] == ["0.0000", "nan", "nan", "0"]
    nll = -sum(s.log_prob for s in expected) / sum(s.tokens for s in expected)
    assert f"mean NLL:  {nll:.4f} nats per token" in err and "4 (1 with an empty source, not scored)" in err


def test_json_to_a_file_ensemble_and_the_config_split(tiny, tmp_path, capsys):
    argv = ["--checkpoint", str(tiny["checkpoint"]), "--json", "--output", str(tmp_path / "one.json")]
    assert score_main(argv) == 0  # no --src/--tgt: the config's data.test split
    assert "mean NLL:" in capsys.readouterr().out  # the summary on stdout when the scores go to a file
    one = json.loads((tmp_path / "one.json").read_text(encoding="utf-8"))
    assert len(one["pairs"]) == 12 and "config data.test" in one["data"]
    pairs = one["pairs"]
    assert one["total"]["nll"] == pytest.approx(-sum(p["log_prob"] for p in pairs) / sum(p["tokens"] for p in pairs))
    assert [p["per_token"] for p in pairs] == pytest.approx([p["log_prob"] / p["tokens"] for p in pairs])
    copies = ["--checkpoint", str(tiny["checkpoint"]), str(tiny["checkpoint"]), "--json", "--quiet"]
    assert score_main(copies) == 0
    two = json.loads(capsys.readouterr().out)
    assert [p["log_prob"] for p in two["pairs"]] == pytest.approx([p["log_prob"] for p in pairs])
    assert score_main(["--checkpoint", str(tiny["checkpoint"]), str(tiny["sibling"]), "--json"]) == 0
    mixed = json.loads(capsys.readouterr().out)
    assert mixed["checkpoint"] == f"{tiny['checkpoint']} + {tiny['sibling']}"
    assert not math.isclose(mixed["total"]["nll"], one["total"]["nll"])


def test_score_errors_exit_2_in_one_line(tiny, tmp_path, capsys):
    src, tgt = _files(tmp_path, ["a", "b"], ["a"])
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    ckpt = str(tiny["checkpoint"])
    cases = [
        (["--checkpoint", ckpt, "--src", src, "--tgt", tgt], "has 2 lines but"),
        (["--checkpoint", ckpt, "--src", str(tmp_path / "empty.txt"), "--tgt", tgt], "empty.txt is empty"),
        (["--checkpoint", ckpt, "--src", src], "--src and --tgt go together"),
        (["--checkpoint", ckpt, "--split", "valid"], "no data.valid split"),
        (["--checkpoint", ckpt, "--src", src, "--tgt", tgt, "--output", src], "is the same file as --src"),
        (["--checkpoint", "missing.pt", "--src", src, "--tgt", tgt], "checkpoint not found: missing.pt"),
        (["--src", src, "--tgt", tgt], "--checkpoint is required"),
    ]
    for argv, message in cases:
        assert score_main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("error: ") and message in err and err.count("\n") == 1, err


def test_the_script_reads_targets_from_a_pipe(tiny):
    script = Path(__file__).parents[1] / "scripts" / "score.py"
    command = [
        sys.executable,
        str(script),
        "--checkpoint",
        str(tiny["checkpoint"]),
        "--src",
        str(tiny["src"]),
        "--tgt",
        "-",
        "--threads",
        "1",
    ]
    run = subprocess.run(
        command, input=tiny["ref"].read_text(encoding="utf-8"), capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.splitlines()) == 12 and "mean NLL:" in run.stderr


def test_translate_and_evaluate_take_several_checkpoints(tiny, tmp_path, capsys):
    lines = read_lines(tiny["src"])[:3]
    ckpt, sibling = str(tiny["checkpoint"]), str(tiny["sibling"])
    assert translate_main(["--checkpoint", ckpt, *lines]) == 0
    alone = capsys.readouterr().out
    assert translate_main(["--checkpoint", ckpt, ckpt, *lines]) == 0  # the TEXT after the checkpoints is TEXT
    assert capsys.readouterr().out == alone
    assert translate_main([lines[0], "--checkpoint", ckpt, lines[1]]) == 2
    assert "in one place" in capsys.readouterr().err
    assert evaluate_main(["--checkpoint", ckpt, sibling, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint: {ckpt} + {sibling}" in " ".join(out.split())
    assert (tiny["checkpoint"].parent / "checkpoint.ensemble2.test.hyp").is_file()
