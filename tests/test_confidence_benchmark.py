"""The confidence benchmark (transformer/benchmarks/confidence.py): its shares and reliability bins worked by hand,
and scripts/benchmark_confidence.py run end to end on a calibrated tiny checkpoint, printing JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_checkpoint

from transformer.benchmarks.confidence import reliability, share_below
from transformer.commands.cli import calibrate_main

ROOT = Path(__file__).resolve().parents[1]


def test_shares_below_a_threshold_worked_by_hand():
    assert share_below([0.1, 0.2, 0.3, 0.4], 0.3) == 0.5  # strictly below: 0.1, 0.2
    assert share_below([0.5], 0.5) == 0.0 and share_below([], 0.5) == 0.0


def test_reliability_bins_sort_by_confidence_and_average_each_bin():
    confidence = [0.9, 0.1, 0.5, 0.3, 0.7]
    chrf = [80.0, 10.0, 40.0, 20.0, 60.0]
    assert reliability(confidence, chrf, bins=2) == [  # cuts at round(2.5) = 2: [0.1, 0.3] and [0.5, 0.7, 0.9]
        {"lines": 2, "confidence": 0.2, "chrf": 0.15},
        {"lines": 3, "confidence": 0.7, "chrf": 0.6},
    ]
    assert [b["lines"] for b in reliability(confidence, chrf, bins=5)] == [1, 1, 1, 1, 1]


@pytest.mark.slow
def test_the_script_measures_a_calibrated_tiny_checkpoint(tmp_path):
    tiny = tiny_checkpoint.build(tmp_path)
    config = f"data:\n  valid: {{src: {tiny['src']}, tgt: {tiny['ref']}}}\n"  # the test lines as validation too
    (tmp_path / "valid.yaml").write_text(config, encoding="utf-8")
    calibrated = tmp_path / "calibrated.pt"
    argv = ["--checkpoint", str(tiny["checkpoint"]), "--config", str(tmp_path / "valid.yaml")]
    assert calibrate_main([*argv, "--output", str(calibrated), "--device", "cpu", "--quiet"]) == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env["OMP_NUM_THREADS"] = "1"
    command = [sys.executable, str(ROOT / "scripts" / "benchmark_confidence.py"), "--checkpoint", str(calibrated)]
    command += ["--config", str(tmp_path / "valid.yaml"), "--negatives", "4", "--json", str(tmp_path / "r.json")]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert result["kind"] == "confidence" and result["test_lines"] == 12 and result["refit_on_validation_matches"]
    assert result["inputs_per_kind"] == {"shuffled": 4, "target_language": 4, "digits": 4}
    assert set(result["flagged"]) == {"test_lines", "shuffled", "target_language", "digits"}
    assert sum(b["lines"] for b in result["reliability"]) == 12
    uncalibrated = [sys.executable, str(ROOT / "scripts" / "benchmark_confidence.py"), "--checkpoint"]
    refused = subprocess.run([*uncalibrated, str(tiny["checkpoint"])], capture_output=True, text=True, env=env)
    assert refused.returncode == 2 and "no confidence calibration" in refused.stderr
