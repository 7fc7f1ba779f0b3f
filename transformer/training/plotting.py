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


def plot_run(out_dir: Path) -> Path | None:
    """A run directory's curves.png from its metrics.jsonl, titled with the run's name."""
    return plot_curves(out_dir / "metrics.jsonl", out_dir / "curves.png", title=f"run {out_dir.name}")


def plot_curves(metrics_path: str | Path, out_path: str | Path, title: str | None = None) -> Path | None:
    """Loss (train and validation), validation BLEU and the learning rate against updates, as a PNG titled with the
    run's name; None without matplotlib. Written to a temporary file and renamed, so a viewer never sees half."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.info(
            "matplotlib is not installed: no curves plot (pip install matplotlib, or from a checkout: "
            "pip install -e '.[plot]')"
        )
        return None
    if not Path(metrics_path).is_file():
        return None
    train, valid = read_metrics(metrics_path)
    fig, (ax_loss, ax_bleu, ax_lr) = plt.subplots(1, 3, figsize=(15, 4))
    ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], label="train (label-smoothed)")
    ax_loss.plot([r["step"] for r in valid], [r["valid_loss"] for r in valid], "o-", label="validation")
    ax_loss.set(xlabel="update", ylabel="loss per target token", title="Loss")
    ax_loss.legend()
    bleu = [r for r in valid if "valid_bleu" in r]
    ax_bleu.plot([r["step"] for r in bleu], [r["valid_bleu"] for r in bleu], "o-", color="tab:green")
    ax_bleu.set(xlabel="update", ylabel="BLEU (greedy)", title="Validation BLEU")
    lr = [r for r in train if "lr" in r]
    ax_lr.plot([r["step"] for r in lr], [r["lr"] for r in lr], color="tab:orange")
    ax_lr.set(xlabel="update", ylabel="learning rate", title="Learning rate")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    tmp = Path(out_path).with_name(f".{Path(out_path).name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(out_path)
    return Path(out_path)
