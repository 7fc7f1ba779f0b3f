"""`make demo`'s pipeline end to end on a tiny budget: every stage produces its output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_demo_pipeline_on_a_tiny_budget(tmp_path):
    out = tmp_path / "demo"
    cmd = [sys.executable, "scripts/demo.py", "--config", "configs/tiny.yaml", "--out", str(out), "--time", "3s",
           "--set", f"data.cache_dir={tmp_path / 'cache'}", "--set", "train.max_steps=0",
           "--examples", "2"]  # fmt: skip
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for stage in ("1. SentencePiece vocabulary and data (", "of 15.0 min left", "2. Training for 0.1 min",
                  "3. Translating the held-out test books", "4. Scores on 40 test verses"):  # fmt: skip
        assert stage in result.stdout
    assert "min left)" in result.stdout.split("3. Translating")[1].splitlines()[0]  # each header: the budget left
    assert "training" in result.stderr and "SentencePiece" in result.stderr  # the tokenizer and the progress
    assert "es  | " in result.stdout and "ref | " in result.stdout and "mt  | " in result.stdout
    assert "BLEU" in result.stdout and "nrefs:1|case:mixed|eff:no|tok:13a" in result.stdout
    scores = json.loads((out / "scores.json").read_text())
    assert scores["reason"] == "max_time" and 0 <= scores["bleu"] <= 100 and scores["budget_minutes"] == 15
    assert len((out / "test.hyp").read_text().splitlines()) == 40
    assert {"checkpoint_last.pt", "metrics.jsonl", "config.yaml"} <= {p.name for p in out.iterdir()}


def test_example_labels_follow_the_source_language(capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("demo_script", ROOT / "scripts" / "demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    demo._show_examples(["Guten Morgen"], ["Good morning"], ["Good day"], 1, "de")
    out = capsys.readouterr().out
    assert "  de  | Guten Morgen" in out and "  ref | Good morning" in out and "  mt  | Good day" in out
    assert "es " not in out
