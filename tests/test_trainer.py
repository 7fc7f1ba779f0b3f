"""The training driver end to end on CPU: checkpoints, exact resume, signals, stop conditions, curves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transformer.checkpoint import load_checkpoint
from transformer.commands.cli import train_main
from transformer.config import load_config
from transformer.decoding.confidence import Calibration
from transformer.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs/tiny.yaml"


def _args(tmp_path: Path, out: str, *overrides: str) -> list[str]:
    settings = [
        f"train.out_dir={tmp_path / out}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "train.log_every=1",
        "model.dropout=0.1",
        *overrides,
    ]
    return ["--config", str(TINY), "--no-progress", *(a for s in settings for a in ("--set", s))]


def _losses(run: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r and "valid_loss" not in r}


def _run(args: list[str], **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "transformer", "train", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def test_tiny_run_writes_everything(tmp_path):
    settings = ("train.max_steps=30", "train.valid_every=15", "train.confidence_lines=12")  # tiny.yaml's is 0
    assert train_main(_args(tmp_path, "run", *settings)) == 0
    run = tmp_path / "run"
    names = {p.name for p in run.iterdir()}
    assert {"config.yaml", "metrics.jsonl", "checkpoint_last.pt", "best.pt", "checkpoint_30.pt"} <= names
    assert load_config(run / "config.yaml").train.max_steps == 30
    losses = _losses(run)
    assert len(losses) == 30 and losses[30] < losses[1] - 1.0
    state = load_checkpoint(run / "checkpoint_last.pt")
    assert state["step"] == 30 and {"optimizer", "sampler", "rng", "tokenizer", "config"} <= state.keys()
    valid = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if "valid_loss" in line]
    assert [v["step"] for v in valid] == [15, 30] and all("valid_bleu" in v for v in valid)
    calibration = Calibration.from_state(torch.load(run / "checkpoint_last.pt", weights_only=True)["confidence"])
    assert calibration is not None and "fitted on 12 validation lines" in calibration.about
    assert "confidence" not in load_checkpoint(run / "best.pt")  # a model of its own validation, not the final one


def test_validation_lines_never_share_the_progress_bar_line(tmp_path):
    args = [a for a in _args(tmp_path, "bar", "train.max_steps=6", "train.valid_every=3") if a != "--no-progress"]
    out, _ = _run(args).communicate(timeout=300)
    segments = [s for s in out.replace("\r", "\n").split("\n") if "validation at update" in s]
    assert len(segments) == 2 and all(s.startswith("validation at update") for s in segments), out


def test_resume_is_exact(tmp_path):
    """Stop after update 12 (max_steps), resume to 25: the same per-update losses as one run to 25, bitwise. The
    split run prefetches batches (train.prefetch, the default 2) and the full one does not: the checkpoint at 12
    must hold the sampler position of the batches trained, not of those drawn ahead."""
    assert train_main(_args(tmp_path, "full", "train.max_steps=25", "train.prefetch=0")) == 0
    assert train_main(_args(tmp_path, "split", "train.max_steps=12")) == 0
    assert train_main(_args(tmp_path, "split", "train.max_steps=25") + ["--resume"]) == 0
    full, split = _losses(tmp_path / "full"), _losses(tmp_path / "split")
    assert sorted(split) == list(range(1, 26))
    assert split == full
    full, split = (load_checkpoint(tmp_path / f"{name}/checkpoint_last.pt") for name in ("full", "split"))
    assert all(torch.equal(full["model"][k], split["model"][k]) for k in full["model"])
    assert "confidence" not in full  # tiny.yaml's train.confidence_lines is 0: no calibration


@pytest.mark.slow
def test_sigterm_saves_and_resume_is_exact(tmp_path):
    """A run killed with SIGTERM at an arbitrary update saves; resuming reproduces the uninterrupted losses."""
    assert train_main(_args(tmp_path, "full", "train.max_steps=300", "train.valid_every=0")) == 0
    proc = _run(_args(tmp_path, "killed", "train.max_steps=300", "train.valid_every=0"))
    for line in proc.stdout:
        if "update 20 " in line:
            break
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    stopped_at = load_checkpoint(tmp_path / "killed/checkpoint_last.pt")["step"]
    assert 20 <= stopped_at < 300, out
    resumed = _run(_args(tmp_path, "killed", "train.max_steps=300", "train.valid_every=0") + ["--resume"])
    assert resumed.wait(timeout=300) == 0
    assert _losses(tmp_path / "killed") == _losses(tmp_path / "full")


def test_stops_on_max_time_and_epochs(tmp_path):
    assert train_main(_args(tmp_path, "epochs", "train.max_steps=0", "train.max_epochs=2")) == 0
    state = load_checkpoint(tmp_path / "epochs/checkpoint_last.pt")
    assert state["epoch"] == 2
    config = load_config(
        TINY,
        [
            "train.max_steps=0",
            "train.max_time=2s",
            f"train.out_dir={tmp_path / 'time'}",
            f"data.cache_dir={tmp_path / 'cache'}",
            "train.valid_every=0",
        ],
    )
    result = Trainer(config, progress=False).run()
    assert result["reason"] == "max_time" and 2.0 <= result["elapsed"] < 30


def test_nan_loss_aborts_with_a_message(tmp_path, capsys, monkeypatch):
    """The loss turns NaN from the third micro-batch on (the real forward pass, its value poisoned): with
    nan_patience 2 the run stops on the second non-finite update in a row, with one line and exit code 2."""
    from transformer.training import optim

    real, calls = optim.batch_loss, []

    def poisoned(*args, **kwargs):
        calls.append(1)
        loss, nll = real(*args, **kwargs)
        return (loss * float("nan"), nll) if len(calls) > 2 else (loss, nll)

    monkeypatch.setattr(optim, "batch_loss", poisoned)
    code = train_main(_args(tmp_path, "nan", "train.max_steps=30", "train.nan_patience=2"))
    err = capsys.readouterr().err
    assert code == 2 and "were not finite for 2 updates in a row" in err
    assert len(calls) < 30  # it stopped early, not at max_steps


def test_bad_config_is_one_line_exit_2(tmp_path, capsys):
    assert train_main(["--config", str(TINY), "--set", "model.d_modle=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown config key 'model.d_modle'") and "\n" not in err
    assert train_main(["--config", str(tmp_path / "missing.yaml")]) == 2


def test_resume_keeps_the_checkpoints_tokenizer(tmp_path):
    assert train_main(_args(tmp_path, "run", "train.max_steps=2")) == 0
    before = load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")["tokenizer"]
    assert train_main(_args(tmp_path, "run", "train.max_steps=4", "data.vocab_size=200") + ["--resume"]) == 0
    after = load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")
    assert after["step"] == 4 and after["tokenizer"] == before and after["vocab"]["src"] == 300


def test_early_stopping_on_patience(tmp_path, monkeypatch):
    """Validation that never improves stops the run after `patience` validations; best.pt is the first one."""
    from transformer.training import validation

    monkeypatch.setattr(validation, "validate", lambda *args, **kwargs: {"valid_loss": 5.0, "valid_bleu": 1.0})
    settings = ["train.max_steps=100", "train.valid_every=2", "train.patience=2", f"train.out_dir={tmp_path / 'run'}"]
    config = load_config(TINY, [*settings, f"data.cache_dir={tmp_path / 'cache'}"])
    result = Trainer(config, progress=False).run()
    assert result["reason"] == "patience" and result["step"] == 6
    assert load_checkpoint(tmp_path / "run/best.pt")["step"] == 2


def test_curves_at_each_validation_and_tensorboard(tmp_path, monkeypatch):
    """curves.png is rewritten at every validation (and at the end), titled with the run; metrics reach TensorBoard."""
    pytest.importorskip("tensorboard")
    import transformer.training.plotting as plotting

    calls = []
    real = plotting.plot_curves
    monkeypatch.setattr(plotting, "plot_curves", lambda *a, **k: calls.append(k.get("title")) or real(*a, **k))
    args = _args(
        tmp_path,
        "tb",
        "train.max_steps=6",
        "train.valid_every=2",
        "train.valid_bleu_sentences=4",
        "train.tensorboard=true",
    )
    assert train_main(args) == 0
    assert calls == ["run tb"] * 4  # validations at 2, 4 and 6, then the end of the run
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb" / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/lr", "valid/loss", "valid/bleu"} <= tags
    assert [e.step for e in events.Scalars("valid/loss")] == [2, 4, 6]
    losses = [json.loads(line) for line in (tmp_path / "tb" / "metrics.jsonl").read_text().splitlines()]
    assert [e.value for e in events.Scalars("train/loss")] == pytest.approx([r["loss"] for r in losses if "lr" in r])


def test_print_config_prints_the_resolved_config(tmp_path, capsys):
    import yaml

    assert train_main(["--config", str(TINY), "--set", "train.lr=1e-3", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["train"]["lr"] == 1e-3
    assert printed["data"]["train"]["tsv"] == str(ROOT / "data/bible-es-en/dev.tsv.xz")  # against configs/
