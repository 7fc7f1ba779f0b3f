"""Training curves from a run's metrics.jsonl, drawn with matplotlib when it is installed (the `plot` extra)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def read_metrics(path: str | Path) -> tuple[list[dict], list[dict]]:
    """(training records, validation records) from a metrics.jsonl file."""
    train, valid = [], []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        (valid if "valid_loss" in record else train).append(record)
    return train, valid


def plot_curves(metrics_path: str | Path, out_path: str | Path) -> Path | None:
    """Loss (train and validation) and validation BLEU against updates, as a PNG; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.info("matplotlib is not installed: no curves plot (pip install 'transformer[plot]')")
        return None
    if not Path(metrics_path).is_file():
        return None
    train, valid = read_metrics(metrics_path)
    fig, (ax_loss, ax_bleu) = plt.subplots(1, 2, figsize=(11, 4))
    ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], label="train (label-smoothed)")
    ax_loss.plot([r["step"] for r in valid], [r["valid_loss"] for r in valid], "o-", label="validation")
    ax_loss.set(xlabel="update", ylabel="loss per target token", title="Loss")
    ax_loss.legend()
    bleu = [r for r in valid if "valid_bleu" in r]
    ax_bleu.plot([r["step"] for r in bleu], [r["valid_bleu"] for r in bleu], "o-", color="tab:green")
    ax_bleu.set(xlabel="update", ylabel="BLEU (greedy)", title="Validation BLEU")
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return Path(out_path)
