"""Live feedback while work runs: spinners with elapsed time, the training bar, and optional TensorBoard logging.

- `spinner(text)`: for steps with no countable progress (SentencePiece training, reading a large corpus), a line
  on stderr that shows the elapsed time, refreshed twice a second; nothing when stderr is not a terminal.
- `training_bar(...)`: counts updates towards `train.max_steps`, or, under `train.max_time` with no step limit,
  fills with the time budget's seconds (the update count then shows as the bar's label).
- `TensorBoardLog`: every metrics record (training and validation) as scalars through PyTorch's own
  `torch.utils.tensorboard.SummaryWriter`, when `train.tensorboard: true` and the `tensorboard` package is installed.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from transformer.errors import UserError


@contextlib.contextmanager
def spinner(text: str, enabled: bool = True) -> Iterator[None]:
    """`text` and the elapsed time on stderr until the block ends (only on a terminal)."""
    if not enabled or not sys.stderr.isatty():
        yield
        return
    bar = tqdm(total=None, desc=text, bar_format="{desc} [{elapsed}]", file=sys.stderr, leave=False)
    stop = threading.Event()

    def refresh() -> None:
        while not stop.wait(0.5):
            bar.refresh()

    thread = threading.Thread(target=refresh, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        bar.close()


def training_bar(*, max_steps: int, max_time: float, step: int, elapsed: float, enabled: bool) -> tqdm:
    """The training progress bar: updates out of max_steps, or seconds out of the max_time budget."""
    if max_steps or not math.isfinite(max_time):
        return tqdm(total=max_steps or None, initial=step, disable=not enabled, unit="upd", dynamic_ncols=True)
    bar_format = "{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f}s budget [{elapsed}<{remaining}{postfix}]"
    bar = tqdm(total=math.ceil(max_time), initial=min(elapsed, max_time), disable=not enabled, unit="s",
               bar_format=bar_format, dynamic_ncols=True)  # fmt: skip
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
