"""`make demo`'s pipeline end to end on a tiny budget: every stage produces its output, and its scores are
`transformer-evaluate`'s on the checkpoint it trained."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _run_demo(out: Path, cache: Path) -> subprocess.CompletedProcess:
    """scripts/demo.py on the tiny config with a budget of 3 s of training and 2 examples, into `out`."""
    cmd = [
        sys.executable,
        "scripts/demo.py",
        "--config",
        "configs/tiny.yaml",
        "--out",
        str(out),
        "--time",
        "3s",
        "--set",
        f"data.cache_dir={cache}",
        "--set",
        "train.max_steps=0",
        "--set",
        "train.confidence_lines=4",  # tiny.yaml's 0: calibrate the average, cheaply
        "--examples",
        "2",
    ]
    result = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _check_the_shipped_model(out: Path, scores: dict, stdout: str) -> None:
    """The shipped model is the mean of the last 3 checkpoints (a checkpoint every 0.07 of the 3 s), the final one
    among them; the probe's prediction is printed beside the updates made."""
    steps = scores["averaged_updates"]
    assert len(steps) == 3 and steps == sorted(steps) and steps[-1] == scores["updates"]
    assert f"averaged the checkpoints of updates {', '.join(f'{s:,}' for s in steps)} into " in stdout
    assert f"the probe predicted {scores['predicted_updates']:,}" in stdout
    from transformer.checkpoint import average_checkpoints, load_checkpoint

    expected = average_checkpoints([out / f"checkpoint_{s}.pt" for s in steps])["model"]
    shipped = load_checkpoint(out / "averaged.pt")["model"]
    assert all(torch.equal(shipped[k], expected[k]) for k in expected)


def _check_a_fresh_evaluation(out: Path, scores: dict, hypotheses: str, stdout: str, tmp_path: Path, capsys) -> None:
    """`transformer-evaluate --checkpoint <out>/averaged.pt` run afresh: the same hypotheses file, scores and
    signatures, and the same report the demo printed in stage 3."""
    from transformer.commands.cli import evaluate_main

    assert evaluate_main(["--checkpoint", str(out / "averaged.pt"), "--json", str(tmp_path / "eval.json")]) == 0
    report = capsys.readouterr().out
    evaluated = json.loads((tmp_path / "eval.json").read_text())
    assert (out / "averaged.test.hyp").read_text(encoding="utf-8") == hypotheses
    assert evaluated == {k: v for k, v in scores.items() if k in evaluated}
    assert set(scores) - set(evaluated) == {
        "updates",
        "reason",
        "train_minutes",
        "total_minutes",
        "budget_minutes",
        "predicted_updates",
        "averaged_updates",
    }
    assert report.strip() in stdout.split("3. Translating")[1]


@pytest.mark.slow
def test_demo_pipeline_on_a_tiny_budget(tmp_path, capsys):
    out = tmp_path / "demo"
    result = _run_demo(out, tmp_path / "cache")
    for stage in (
        "1. SentencePiece vocabulary and data (",
        "of 15.0 min left",
        "2. Training configs/tiny.yaml (",
        " updates/s here (median of ",
        "for 0.1 min (",
        "3. Translating and scoring the held-out test books: transformer-evaluate --checkpoint",
        "4. Scores on 40 test verses",
    ):
        assert stage in result.stdout
    assert "min left)" in result.stdout.split("3. Translating")[1].splitlines()[0]  # each header: the budget left
    assert "training" in result.stderr and "SentencePiece" in result.stderr  # the tokenizer and the progress
    stage_4 = result.stdout.split("4. Scores on")[1]
    assert "es  | " in stage_4 and "ref | " in stage_4 and "mt  | " in stage_4
    scores = json.loads((out / "scores.json").read_text())
    assert scores["reason"] == "max_time" and scores["budget_minutes"] == 15
    hypotheses = (out / "averaged.test.hyp").read_text(encoding="utf-8")
    assert len(hypotheses.splitlines()) == 40 and scores["hypotheses"] == str(out / "averaged.test.hyp")
    assert {"averaged.pt", "checkpoint_last.pt", "metrics.jsonl", "config.yaml"} <= {p.name for p in out.iterdir()}
    assert "fitted on 4 validation lines" in torch.load(out / "averaged.pt", weights_only=True)["confidence"]["about"]
    assert "confidence" not in torch.load(out / "checkpoint_last.pt", weights_only=True)  # the average's alone
    _check_the_shipped_model(out, scores, result.stdout)
    # the last lines: BLEU and chrF, as the scores file has them
    assert f"\nBLEU {scores['bleu']:.1f}  {scores['bleu_signature']}\n" in stage_4
    assert f"\nchrF {scores['chrf']:.1f}  {scores['chrf_signature']}\n" in stage_4
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")

    _check_a_fresh_evaluation(out, scores, hypotheses, result.stdout, tmp_path, capsys)


@pytest.mark.parametrize(
    "steps, expected",
    [
        ([900, 1800, 2700, 3600, 4500], [2700, 3600, 4500]),  # evenly spaced: the last three
        (
            [900, 1800, 2700, 3600, 4480, 4500],
            [2700, 3600, 4500],
        ),  # the clock's last tick, 20 updates early: passed over
        ([4500], [4500]),  # one checkpoint: itself
        ([2000, 4500], [2000, 4500]),
    ],
)
def test_the_averaged_checkpoints_are_the_final_one_and_those_an_interval_apart(steps, expected):
    """A checkpoint every 0.2 of the training, the last 3 averaged: half an interval is 0.1 x 4,500 = 450 updates."""
    assert _demo_module()._steps_to_average(steps, 3, 0.2) == expected


def test_example_labels_follow_the_source_language(capsys):
    demo = _demo_module()
    demo._show_examples(["Guten Morgen"], ["Good morning"], ["Good day"], 1, "de")
    out = capsys.readouterr().out
    assert "  de  | Guten Morgen" in out and "  ref | Good morning" in out and "  mt  | Good day" in out
    assert "es " not in out


def _demo_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("demo_script", ROOT / "scripts" / "demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


@pytest.mark.parametrize("threshold, picked", [(0, "tiny.yaml"), (10**9, "small.yaml")])
def test_the_small_preset_is_trained_when_the_config_would_make_too_few_updates(tmp_path, threshold, picked):
    """The probe's rate times the training time against SMALL_PRESET_BELOW: no machine makes 10^9 updates in a
    minute, every machine makes at least 0."""

    from transformer.config import load_config
    from transformer.data.prepare import prepare_data

    demo = _demo_module()
    demo.SMALL_PRESET_BELOW = threshold
    (tmp_path / "small.yaml").write_text(f"base: {ROOT / 'configs' / 'tiny.yaml'}\nmodel: {{d_model: 16}}\n")
    cache = f"data.cache_dir={tmp_path / 'cache'}"
    args = demo._parser().parse_args(
        [
            "--config",
            str(ROOT / "configs/tiny.yaml"),
            "--out",
            str(tmp_path / "out"),
            "--small-config",
            str(tmp_path / "small.yaml"),
            "--set",
            cache,
        ]
    )
    config = load_config(args.config, [f"train.out_dir={args.out}", cache])
    data = prepare_data(config)
    chosen, why, rate = demo._preset(args, config, data, torch.device("cpu"), 60.0)
    assert why.startswith(str(tmp_path / picked) if picked == "small.yaml" else args.config) and rate > 0
    assert chosen.model.d_model == (16 if picked == "small.yaml" else 32)
    assert chosen.train.out_dir == str(tmp_path / "out") and "updates/s here (median of " in why
