"""plotting.py: metrics.jsonl is split into training and validation records; the curves are a PNG written whole."""

from __future__ import annotations

import json
import sys

from transformer.training.plotting import plot_curves, plot_run, read_metrics

RECORDS = [
    {"step": 50, "loss": 5.1, "lr": 1e-4},
    {"step": 100, "loss": 4.2, "lr": 2e-4},
    {"step": 100, "valid_loss": 4.5, "valid_bleu": 3.2},
    {"step": 150, "loss": 3.9, "lr": 3e-4},
    {"step": 200, "valid_loss": 4.0},  # a validation without BLEU
]


def _metrics(folder):
    path = folder / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    return path


def test_read_metrics_splits_training_from_validation(tmp_path):
    train, valid = read_metrics(_metrics(tmp_path))
    assert [r["step"] for r in train] == [50, 100, 150] and [r["step"] for r in valid] == [100, 200]


def test_plot_run_writes_a_png_and_no_temporary_file(tmp_path):
    _metrics(tmp_path)
    out = plot_run(tmp_path)
    assert out == tmp_path / "curves.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.png", "metrics.jsonl"]


def test_without_matplotlib_or_metrics_there_is_no_plot(tmp_path, monkeypatch):
    assert plot_curves(tmp_path / "missing.jsonl", tmp_path / "c.png") is None
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    assert plot_curves(_metrics(tmp_path), tmp_path / "c.png") is None
    assert not (tmp_path / "c.png").exists()
