"""Live feedback while training runs: the training bar, metrics.jsonl and optional TensorBoard logging.

- `training_bar(...)`: counts updates towards `train.max_steps`, or, under `train.max_time` with no step limit,
  fills with the time budget's seconds (the update count then shows as the bar's label).
- `RunLog`: metrics.jsonl (and TensorBoard), the training log line and the bar's postfix.
- `TensorBoardLog`: every metrics record (training and validation) as scalars through PyTorch's own
  `torch.utils.tensorboard.SummaryWriter`, when `train.tensorboard: true` and the `tensorboard` package is installed.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from tqdm import tqdm

from transformer.errors import UserError

log = logging.getLogger(__name__)


def training_bar(*, max_steps: int, max_time: float, step: int, elapsed: float, enabled: bool) -> tqdm:
    """The training progress bar: updates out of max_steps, or seconds out of the max_time budget."""
    if max_steps or not math.isfinite(max_time):
        return tqdm(total=max_steps or None, initial=step, disable=not enabled, unit="upd", dynamic_ncols=True)
    bar_format = "{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f}s budget [{elapsed}<{remaining}{postfix}]"
    bar = tqdm(
        total=math.ceil(max_time),
        initial=min(elapsed, max_time),
        disable=not enabled,
        unit="s",
        bar_format=bar_format,
        dynamic_ncols=True,
    )
    bar.set_description_str(f"{step} upd", refresh=False)
    bar.time_budget = True
    return bar


def advance(bar: tqdm, step: int, elapsed: float) -> None:
    """One update done: +1 on a step bar; on a time-budget bar, the elapsed seconds and the update count."""
    if not getattr(bar, "time_budget", False):
        bar.update(1)
        return
    bar.set_description_str(f"{step} upd", refresh=False)
    bar.update(max(0.0, min(elapsed, bar.total) - bar.n))


class TensorBoardLog:
    """Scalars to `<folder>` through `torch.utils.tensorboard.SummaryWriter` (needs the tensorboard package);
    does nothing when not `enabled`."""

    def __init__(self, folder: str | Path, enabled: bool = True) -> None:
        self.writer = None
        if not enabled:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise UserError(
                "train.tensorboard: true needs the tensorboard package: pip install tensorboard (or, from a "
                "checkout, pip install -e '.[tensorboard]'), or set train.tensorboard: false"
            ) from None
        self.writer = SummaryWriter(log_dir=str(folder))

    def log(self, record: dict[str, Any]) -> None:
        """A metrics.jsonl record: `valid_*` keys under valid/, the others under train/, at its step."""
        if self.writer is None:
            return
        step = record["step"]
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                tag = f"valid/{key[6:]}" if key.startswith("valid_") else f"train/{key}"
                self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class RunLog:
    """A run's metrics: metrics.jsonl and TensorBoard (rank 0 only), the training log line, the bar's postfix."""

    def __init__(self, out_dir: Path, *, enabled: bool, tensorboard: bool, progress: bool) -> None:
        self.path, self.enabled, self.progress = Path(out_dir) / "metrics.jsonl", enabled, progress
        self.tensorboard = TensorBoardLog(Path(out_dir) / "tensorboard", enabled=tensorboard and enabled)

    def write(self, record: dict[str, Any]) -> None:
        if self.enabled:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
            self.tensorboard.log(record)

    def train(self, record: dict[str, Any], bar: tqdm) -> None:
        """A training record (loss, lr, wpb, tok_s, ...): written, on the bar, and logged when there is no bar."""
        self.write(record)
        bar.set_postfix(
            loss=f"{record['loss']:.3f}",
            lr=f"{record['lr']:.2e}",
            wpb=f"{record['wpb']:.0f}",
            tok_s=f"{record['tok_s']:.0f}",
        )
        if not self.progress and self.enabled:
            log.info("update %d %s", record["step"], " ".join(f"{k} {v:.4g}" for k, v in record.items() if k != "step"))

    def close(self) -> None:
        self.tensorboard.close()
