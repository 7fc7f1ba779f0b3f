"""Training statistics between two log lines, and the skip flags the host has not read yet.

Where `training.train_update` decides skips on the device (`training.skips_on_device`: a fused Adam, bf16 or fp32
on CUDA) its statistics are () device tensors. The trainer then counts every update as applied and reads the flags
(`PendingSkips.read`, one sync) only where the exact count matters: at log, validation and save points, at
max_steps, and before a checkpoint. So the update count, those points and checkpoints are the same as with a sync
per update; the nan_patience abort comes at the next log point (at most train.log_every updates late); and the
learning rate of the updates between a skipped one and that point runs ahead of the schedule by the skips.
"""

from __future__ import annotations

import math
import time

import torch

from transformer.training import UpdateStats


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
        values = torch.stack([torch.as_tensor(v, device=self.run.device).long() for v in
                              (self.skipped, self.last, self.worst, self.run)]).tolist()  # fmt: skip
        skipped, last, worst, run = values
        self.count, self.skipped, self.last, self.run, self.worst = 0, 0, False, run, run
        return skipped, bool(last), worst
