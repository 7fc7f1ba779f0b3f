"""Training statistics between two log lines, and the skip flags the host has not read yet.

Where `optim.train_update` decides skips on the device (`optim.skips_on_device`: a fused Adam, bf16 or fp32
on CUDA) its statistics are () device tensors. The trainer then counts every update as applied and reads the flags
(`PendingSkips.read`, one sync) only where the exact count matters: at log, validation and save points, at
max_steps, and before a checkpoint. So the update count, those points and checkpoints are the same as with a sync
per update; the nan_patience abort comes at the next log point (at most train.log_every updates late); and the
learning rate of the updates between a skipped one and that point runs ahead of the schedule by the skips.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch

from transformer.errors import UserError
from transformer.training.optim import UpdateStats


class StatsWindow:
    """Running sums between two log lines: loss and nll per token, tokens per update, tokens per second."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.loss = self.nll = 0.0  # float, or a () float64 tensor while device statistics are summed
        self.tokens = self.updates = 0
        self.skipped = 0  # int, or a () tensor
        self.since = time.time()

    def add(self, stats: UpdateStats) -> None:
        if stats.on_device:  # no host read: non-finite losses count as 0, as below
            finite = torch.isfinite(stats.loss)
            self.loss = self.loss + torch.where(finite, stats.loss * stats.tokens, 0.0)
            self.nll = self.nll + torch.where(finite, stats.nll * stats.tokens, 0.0)
            self.skipped = self.skipped + stats.skipped.long()
        else:
            if math.isfinite(stats.loss):
                self.loss += stats.loss * stats.tokens
                self.nll += stats.nll * stats.tokens
            self.skipped += stats.skipped
        self.tokens += stats.tokens
        self.updates += 1

    def summary(self) -> dict[str, float]:
        loss, nll, skipped = (float(v) for v in (self.loss, self.nll, self.skipped))  # the one read of the window
        seconds = max(time.time() - self.since, 1e-9)
        out = {
            "loss": loss / max(self.tokens, 1),
            "nll": nll / max(self.tokens, 1),
            "wpb": self.tokens / max(self.updates, 1),
            "tok_s": self.tokens / seconds,
            "skipped": int(skipped),
        }
        out["ppl"] = math.exp(min(out["nll"], 50.0))
        self.reset()
        return out


class PendingSkips:
    """Skip flags of device-decided updates not yet read on the host, and the run of non-finite updates."""

    def __init__(self) -> None:
        self.count = 0  # updates since the last read
        self.skipped: int | torch.Tensor = 0  # of those, skipped
        self.last: bool | torch.Tensor = False  # the latest one was skipped
        self.run: int | torch.Tensor = 0  # non-finite updates in a row, up to the latest
        self.worst: int | torch.Tensor = 0  # the longest such run since the last read

    def add(self, stats: UpdateStats) -> None:
        self.count += 1
        self.skipped = self.skipped + stats.skipped.long()
        self.last = stats.skipped
        self.run = (self.run + 1) * stats.nonfinite.long()
        self.worst = torch.maximum(torch.as_tensor(self.worst, device=self.run.device), self.run)

    def read(self) -> tuple[int, bool, int]:
        """(skipped, the latest was skipped, longest non-finite run) since the last read: one host-device sync."""
        if not self.count:
            return 0, False, 0
        values = torch.stack(
            [torch.as_tensor(v, device=self.run.device).long() for v in (self.skipped, self.last, self.worst, self.run)]
        ).tolist()
        skipped, last, worst, run = values
        self.count, self.skipped, self.last, self.run, self.worst = 0, 0, False, run, run
        return skipped, bool(last), worst


class UpdateCount:
    """The applied-update count (the schedule's step), the skipped count, and the nan_patience rule. Host-decided
    skips count at once; device-decided ones count as applied until `settle` reads them."""

    def __init__(self, *, step: int, skipped: int, nan_patience: int) -> None:
        self.step, self.skipped, self.nan_patience = step, skipped, nan_patience
        self.pending, self.nonfinite = PendingSkips(), 0  # nonfinite: host-decided non-finite updates in a row

    def add(self, stats: UpdateStats, due: Callable[[int], bool]) -> bool:
        """Count one update; True when it was applied. `due(step)`: must the count be exact at this step?"""
        if stats.on_device:  # counted as applied until read; read where the count matters
            self.pending.add(stats)
            self.step += 1
            return not self.settle() if due(self.step) else True
        self.nonfinite = self.nonfinite + 1 if stats.nonfinite else 0
        self.check_nan_patience(self.nonfinite)
        applied = not stats.skipped
        self.step, self.skipped = self.step + applied, self.skipped + (not applied)
        return applied

    def settle(self) -> bool:
        """Read the device-decided skips (one sync): take them off the update count, apply nan_patience; True when
        the latest update was skipped."""
        skipped, last, worst = self.pending.read()
        self.step, self.skipped = self.step - skipped, self.skipped + skipped
        self.check_nan_patience(worst)
        return last

    def check_nan_patience(self, nonfinite: int) -> None:
        if nonfinite >= self.nan_patience:
            raise UserError(
                f"the loss or the gradients were not finite for {nonfinite} updates in a row (after update "
                f"{self.step}): lower the learning rate or lengthen the warmup, clip gradients (train.clip_norm), "
                "or use bf16 instead of fp16"
            )
