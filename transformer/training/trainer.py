"""The training loop (the paper's section 5): updates of `optim.train_update` on what `setup.build_run`
set up, with validation and early stopping (validation.py), rotating checkpoints (checkpoint.py), exact resume,
signals and progress. One process per device; under `torchrun` the processes form a DDP group and rank 0 alone
logs and writes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from transformer.checkpoint import save_rotating
from transformer.config import Config, parse_duration, save_config
from transformer.devices import OutOfMemoryError, out_of_memory
from transformer.errors import UserError
from transformer.fileio import RunLock, remove_stale_temporaries
from transformer.training import optim
from transformer.training.distributed import any_rank, barrier
from transformer.training.feedback import RunLog, advance, training_bar
from transformer.training.plotting import plot_run
from transformer.training.prefetch import Prefetcher
from transformer.training.setup import build_run, describe, training_state
from transformer.training.stats_window import StatsWindow, UpdateCount
from transformer.training.validation import EarlyStopping, Validator

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------- the trainer


def train_batches(data, sampler, cfg) -> Iterator:
    """(sampler state after the batch, host batch), epoch after epoch, until max_epochs; run by `Prefetcher`,
    on its thread when train.prefetch > 0."""
    from transformer.data.batching import collate

    while not cfg.max_epochs or sampler.epoch < cfg.max_epochs:
        split = data.train_split(sampler.epoch)  # a sampled copy per epoch under data.subword_sampling
        for indices in sampler:
            yield sampler.state_dict(), collate(split, indices, bucket=cfg.length_buckets, bos_id=data.tokenizer.bos_id)


def count_due(cfg, step: int) -> bool:
    """Does something happen at this update count (a log line, validation, checkpoint, max_steps)?"""
    every = (cfg.log_every, cfg.valid_every, cfg.save_every)
    return any(n and step % n == 0 for n in every) or bool(cfg.max_steps and step >= cfg.max_steps)


class StopConditions:
    """SIGINT/SIGTERM (caught while the block runs, the previous handlers restored after), max_steps and max_time,
    agreed between ranks."""

    def __init__(self, cfg, world: int, device) -> None:
        self.max_steps, self.world, self.device = cfg.max_steps, world, device
        self.max_time = parse_duration(cfg.max_time) if cfg.max_time else math.inf
        self.signal: str | None = None
        self.previous: dict = {}

    def __enter__(self) -> StopConditions:
        def handler(signum, frame):
            self.signal = signal.Signals(signum).name

        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.getsignal(sig)
            signal.signal(sig, handler)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def reason(self, step: int, elapsed: float) -> str | None:
        reason = None
        if self.signal:
            reason = self.signal
        elif self.max_steps and step >= self.max_steps:
            reason = "max_steps"
        elif elapsed >= self.max_time:
            reason = "max_time"
        if self.world > 1 and any_rank(reason is not None, self.device):
            reason = reason or "another rank stopped"
        return reason


class Trainer:
    """Trains what `setup.build_run` set up: `run()` until a stop condition, returning the final metrics."""

    def __init__(self, config: Config, *, resume: bool | str = False, progress: bool = True) -> None:
        self.config, self.created = config, time.perf_counter()
        self.train_cfg = cfg = config.train
        self.setup = run = build_run(config, resume=resume, progress=progress)
        self.model, self.optimizer, self.data, self.sampler = run.model, run.optimizer, run.data, run.sampler
        self.is_main, self.progress, self.out_dir = run.rank == 0, progress and run.rank == 0, Path(cfg.out_dir)
        restored = run.restored or {"step": 0, "progress": {"best": None, "bad_validations": 0, "elapsed": 0.0}}
        done = restored["progress"]
        self.count = UpdateCount(step=restored["step"], skipped=done.get("skipped", 0), nan_patience=cfg.nan_patience)
        self.early_stopping = EarlyStopping(
            patience=cfg.patience,
            best_metric=cfg.best_metric,
            best=done["best"],
            bad_validations=done["bad_validations"],
        )
        self.start_time, self.elapsed_before = time.time(), done["elapsed"]
        self.sampler_trained: dict | None = None  # the sampler's state after the last batch trained
        self.calibration = None  # the final model's confidence calibration (`calibrate`), once fitted

    @property
    def step(self) -> int:
        return self.count.step

    def elapsed(self) -> float:
        return self.elapsed_before + time.time() - self.start_time

    def save(self, reason: str) -> None:
        """checkpoint_<step>.pt (full state), checkpoint_last.pt linked to it; keep the last `keep_last`."""
        self.count.settle()
        stopping, sampler = self.early_stopping, self.sampler_trained or self.sampler.state_dict()  # not drawn ahead
        state = training_state(
            self.setup,
            self.config,
            step=self.step,
            sampler=sampler,
            progress={
                "best": stopping.best,
                "bad_validations": stopping.bad_validations,
                "elapsed": self.elapsed(),
                "skipped": self.count.skipped,
            },
        )
        if self.calibration is not None:
            state["confidence"] = self.calibration.to_state()  # the final checkpoint's (`calibrate`)
        if self.is_main:
            path = save_rotating(state, self.out_dir, step=self.step, keep_last=self.train_cfg.keep_last)
            log.info("saved %s (%s)", path, reason)

    def calibrate(self) -> None:
        """On rank 0: the final model's confidence calibration (training/calibration.py) on the first
        train.confidence_lines validation pairs, stored in the final checkpoint; none without validation text."""
        split, lines = self.data.splits.get("valid"), self.train_cfg.confidence_lines
        if not (self.is_main and lines and split is not None and split.src_text is not None):
            return
        from transformer.decoding.streaming import StreamingEngine
        from transformer.training.calibration import calibrate

        run = self.setup
        log.info("calibrating the confidence on up to %d validation pairs", lines)
        translator = StreamingEngine(run.model, self.data.tokenizer, self.config.decode, device=run.device)
        self.calibration = calibrate(translator, split.src_text, split.tgt_text, lines=lines)
        run.model.train()

    def run(self, *, final_validation: bool = True) -> dict[str, Any]:
        """Train until a stop condition, holding the run directory's lock (train.lock), with which it first removes
        the temporary files that killed writes left there. `final_validation=False`: no off-schedule validation at
        the end (a run continued in pieces validates as an uninterrupted one would)."""
        with RunLock(self.out_dir) if self.is_main else contextlib.nullcontext():
            if self.is_main:
                remove_killed_writes(self.out_dir)
            return self._run(final_validation)

    def _run(self, final_validation: bool) -> dict[str, Any]:
        cfg, run = self.train_cfg, self.setup
        if self.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            save_config(self.config, self.out_dir / "config.yaml")
        with StopConditions(cfg, run.world, run.device) as stops:
            log.info("training %s", describe(run, cfg))
            self.metrics = RunLog(
                self.out_dir, enabled=self.is_main, tensorboard=cfg.tensorboard, progress=self.progress
            )
            self.validate = Validator(self.config, run, self.early_stopping, self.metrics.write, progress=self.progress)
            # Log lines (validation) go through tqdm.write, so they never land on the bar's line.
            bar = training_bar(
                max_steps=cfg.max_steps,
                max_time=stops.max_time,
                step=self.step,
                elapsed=self.elapsed(),
                enabled=self.progress,
            )
            self.sampler_trained = self.sampler.state_dict()  # from here on the prefetcher's thread moves it
            batches = Prefetcher(train_batches(self.data, self.sampler, cfg), run.device, depth=cfg.prefetch)
            with logging_redirect_tqdm(), bar, batches:
                reason = self._train_loop(batches, bar, stops)
            return self._finish(reason, final_validation)

    def _finish(self, reason: str, final_validation: bool) -> dict[str, Any]:
        """The final validation (unless just done or stopped by patience), the last checkpoint, the curves."""
        cfg = self.train_cfg
        self.count.settle()
        log.info("stopping at update %d: %s", self.step, reason)
        if final_validation and reason != "patience" and (not cfg.valid_every or self.step % cfg.valid_every):
            self.validate(self.step)
        if final_validation and reason not in ("SIGINT", "SIGTERM"):
            self.calibrate()
        self.save(reason)
        final = {
            "step": self.step,
            "reason": reason,
            "best": self.early_stopping.best,
            "elapsed": self.elapsed(),
            "skipped": self.count.skipped,
        }
        if self.is_main:
            plot_run(self.out_dir)
            self.metrics.close()
        barrier()
        return final

    def _train_loop(self, batches: Prefetcher, bar: tqdm, stops: StopConditions) -> str:
        """Updates until a stop condition (section 5: Adam, the warmup schedule, batches of about
        train.update_tokens); returns the reason."""
        cfg, run = self.train_cfg, self.setup
        last_save, window, first_step = time.time(), StatsWindow(), self.step + 1
        reason = stops.reason(self.step, self.elapsed())  # a resumed run may have nothing left to do
        run.net.train()
        while reason is None:
            drawn = [item for _, item in zip(range(run.accumulation), batches)]
            if not drawn:  # the source is exhausted (the thread is done with the sampler): its final state
                self.sampler_trained = self.sampler.state_dict()
                return "max_epochs"
            lr = optim.learning_rate(self.step + 1, cfg, self.config.model)
            stats = checked_update(self, [batch for _, batch in drawn], lr)
            self.sampler_trained = drawn[-1][0]
            window.add(stats)
            # the schedule and max_steps advance on applied updates only
            if not self.count.add(stats, functools.partial(count_due, cfg)):
                reason = stops.reason(self.step, self.elapsed())
                continue
            if self.step == first_step:  # start-up cost (docs/benchmarks.md): data, model, the first update
                log.info("first update done %.1f s after the trainer started", time.perf_counter() - self.created)
            reason = self._after_update(window, bar, stops)
            minutes_due = bool(cfg.save_every_minutes) and any_rank(  # ranks must agree: saving is a collective
                time.time() - last_save >= 60 * cfg.save_every_minutes, run.device
            )
            if reason is None and ((cfg.save_every and self.step % cfg.save_every == 0) or minutes_due):
                self.save("scheduled")
                last_save = time.time()
        return reason

    def _after_update(self, window: StatsWindow, bar: tqdm, stops: StopConditions) -> str | None:
        """Log, advance the bar, validate when due; the stop reason, if any."""
        cfg = self.train_cfg
        if self.step % cfg.log_every == 0:
            self.metrics.train(
                {
                    "step": self.step,
                    **window.summary(),
                    "lr": self.optimizer.param_groups[0]["lr"],
                    "elapsed": round(self.elapsed(), 2),
                },
                bar,
            )
        advance(bar, self.step, self.elapsed())
        if cfg.valid_every and self.step % cfg.valid_every == 0 and self.validate(self.step):
            return "patience"
        return stops.reason(self.step, self.elapsed())


def checked_update(trainer: Trainer, micro_batches: list, lr: float) -> optim.UpdateStats:
    """The trainer's next optimizer update (`optim.train_update`); running out of GPU memory is a `UserError` naming
    the micro-batch and the settings to lower, and leaves the checkpoints as they are."""
    cfg, run = trainer.train_cfg, trainer.setup
    try:
        return optim.train_update(
            run.net,
            micro_batches,
            trainer.optimizer,
            lr=lr,
            train=cfg,
            precision=run.precision,
            scaler=run.scaler,
            pad_id=trainer.model.pad_id,
        )
    except OutOfMemoryError as exc:
        raise out_of_memory_in_update(exc, micro_batches, cfg, trainer.out_dir) from None


def remove_killed_writes(out_dir: Path) -> None:
    """Remove the temporary files that writes killed half-way left in the run directory (its lock is held), and
    say so in one line."""
    if removed := remove_stale_temporaries(out_dir):
        names = ", ".join(path.name for path, _ in removed)
        log.info(
            "removed %d temporary file(s), %.1f MB, left in %s by writes that were killed: %s",
            len(removed),
            sum(size for _, size in removed) / 1e6,
            out_dir,
            names,
        )


def out_of_memory_in_update(exc: BaseException, micro_batches: list, cfg, out_dir: Path) -> UserError:
    """The one-line error for an update that ran out of GPU memory: its largest micro-batch, the setting to lower
    (train.max_tokens; the update's size is kept by accumulating more micro-batches) and the checkpoint to go on
    from."""
    largest = max(micro_batches, key=lambda b: b.src.numel() + b.tgt_in.numel())
    (B, S), T = largest.src.shape, largest.tgt_in.shape[1]
    what = (
        f"in a training update, on a micro-batch of {B} sentences, {largest.n_tgt_tokens:,} target tokens "
        f"(padded: {B}x{S} source, {B}x{T} target)"
    )
    keep = (
        f"and double train.accumulation (now {cfg.accumulation}) to keep the update's size"
        if cfg.accumulation
        else f"train.update_tokens ({cfg.update_tokens:,}) stays: more micro-batches are accumulated per update"
    )
    last = out_dir / "checkpoint_last.pt"
    saved = (
        f"the last checkpoint, {last}, is intact (--resume needs the same train.max_tokens; --set "
        f"train.init_from={last} starts from its weights)"
        if last.exists()
        else "no checkpoint was written yet"
    )
    return out_of_memory(
        exc,
        what,
        f"lower train.max_tokens (now {cfg.max_tokens:,}), e.g. --set train.max_tokens="
        f"{cfg.max_tokens // 2}; {keep}; {saved}",
    )
