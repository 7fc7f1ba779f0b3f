"""`make demo`'s pipeline end to end on a tiny budget: every stage produces its output, and its scores are
`transformer-evaluate`'s on the checkpoint it trained."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_demo_pipeline_on_a_tiny_budget(tmp_path, capsys):
    out = tmp_path / "demo"
    cmd = [sys.executable, "scripts/demo.py", "--config", "configs/tiny.yaml", "--out", str(out), "--time", "3s",
           "--set", f"data.cache_dir={tmp_path / 'cache'}", "--set", "train.max_steps=0",
           "--examples", "2"]  # fmt: skip
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for stage in ("1. SentencePiece vocabulary and data (", "of 15.0 min left",
                  "2. Training configs/tiny.yaml for 0.1 min",
                  "3. Translating and scoring the held-out test books: transformer-evaluate --checkpoint",
                  "4. Scores on 40 test verses"):  # fmt: skip
        assert stage in result.stdout
    assert "min left)" in result.stdout.split("3. Translating")[1].splitlines()[0]  # each header: the budget left
    assert "training" in result.stderr and "SentencePiece" in result.stderr  # the tokenizer and the progress
    stage_4 = result.stdout.split("4. Scores on")[1]
    assert "es  | " in stage_4 and "ref | " in stage_4 and "mt  | " in stage_4
    scores = json.loads((out / "scores.json").read_text())
    assert scores["reason"] == "max_time" and scores["budget_minutes"] == 15
    hypotheses = (out / "checkpoint_last.test.hyp").read_text(encoding="utf-8")
    assert len(hypotheses.splitlines()) == 40 and scores["hypotheses"] == str(out / "checkpoint_last.test.hyp")
    assert {"checkpoint_last.pt", "metrics.jsonl", "config.yaml"} <= {p.name for p in out.iterdir()}
    # the last lines: BLEU and chrF, as the scores file has them
    assert f"\nBLEU {scores['bleu']:.1f}  {scores['bleu_signature']}\n" in stage_4
    assert f"\nchrF {scores['chrf']:.1f}  {scores['chrf_signature']}\n" in stage_4
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")

    # `transformer-evaluate --checkpoint <out>/checkpoint_last.pt` run afresh: the same hypotheses file, scores and
    # signatures, and the same report the demo printed in stage 3
    from transformer.commands.cli import evaluate_main

    assert evaluate_main(["--checkpoint", str(out / "checkpoint_last.pt"), "--json", str(tmp_path / "eval.json")]) == 0
    report = capsys.readouterr().out
    evaluated = json.loads((tmp_path / "eval.json").read_text())
    assert (out / "checkpoint_last.test.hyp").read_text(encoding="utf-8") == hypotheses
    assert evaluated == {k: v for k, v in scores.items() if k in evaluated}
    assert set(scores) - set(evaluated) == {"updates", "reason", "train_minutes", "total_minutes", "budget_minutes"}
    assert report.strip() in result.stdout.split("3. Translating")[1]


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
    import torch

    from transformer.config import load_config
    from transformer.data.prepare import prepare_data

    demo = _demo_module()
    demo.SMALL_PRESET_BELOW = threshold
    (tmp_path / "small.yaml").write_text(f"base: {ROOT / 'configs' / 'tiny.yaml'}\nmodel: {{d_model: 16}}\n")
    cache = f"data.cache_dir={tmp_path / 'cache'}"
    args = demo._parser().parse_args(["--config", str(ROOT / "configs/tiny.yaml"), "--out", str(tmp_path / "out"),
                                      "--small-config", str(tmp_path / "small.yaml"), "--set", cache])  # fmt: skip
    config = load_config(args.config, [f"train.out_dir={args.out}", cache])
    data = prepare_data(config)
    chosen, why = demo._preset(args, config, data, torch.device("cpu"), 60.0)
    assert why.startswith(str(tmp_path / picked) if picked == "small.yaml" else args.config)
    assert chosen.model.d_model == (16 if picked == "small.yaml" else 32)
    assert chosen.train.out_dir == str(tmp_path / "out") and "updates/s here: about" in why
