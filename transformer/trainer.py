"""The training loop (the paper's section 5): updates of `training.train_update` on what `run_setup.build_run`
set up, with validation and early stopping (validation.py), rotating checkpoints (checkpoint.py), exact resume,
signals and progress. One process per device; under `torchrun` the processes form a DDP group and rank 0 alone
logs and writes.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from transformer import training
from transformer.checkpoint import model_state, save_checkpoint, save_rotating
from transformer.config import Config, parse_duration, save_config
from transformer.distributed import any_rank, barrier, rng_states
from transformer.errors import UserError
from transformer.feedback import TensorBoardLog, advance, training_bar
from transformer.fileio import RunLock
from transformer.plotting import plot_run
from transformer.prefetch import Prefetcher
from transformer.run_setup import build_run
from transformer.stats_window import PendingSkips, StatsWindow
from transformer.validation import EarlyStopping, validate

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------- the trainer


class Trainer:
    """Holds the run's state; `run()` trains until a stop condition and returns the final metrics."""

    def __init__(self, config: Config, *, resume: bool | str = False, progress: bool = True) -> None:
        from transformer.tokenizer import PAD_ID

        self.created = time.perf_counter()
        self.config, self.train_cfg = config, config.train
        run = build_run(config, resume=resume, progress=progress)
        self.rank, self.world, self.device, self.precision = run.rank, run.world, run.device, run.precision
        self.is_main, self.progress = run.rank == 0, progress and run.rank == 0
        self.out_dir = Path(self.train_cfg.out_dir)
        self.data, self.tokenizer, self.pad_id = run.data, run.data.tokenizer, PAD_ID
        self.sampler, self.accumulation = run.sampler, run.accumulation
        self.model, self.optimizer, self.scaler, self.net = run.model, run.optimizer, run.scaler, run.net
        self.early_stopping = EarlyStopping(patience=self.train_cfg.patience, best_metric=self.train_cfg.best_metric)
        self.step, self.skipped, self.elapsed_before = 0, 0, 0.0
        if run.restored:
            progress_state = run.restored["progress"]
            self.step, self.skipped = run.restored["step"], progress_state.get("skipped", 0)
            self.early_stopping.best = progress_state["best"]
            self.early_stopping.bad_validations = progress_state["bad_validations"]
            self.elapsed_before = progress_state["elapsed"]
        self.pending = PendingSkips()  # skip flags decided on the device, not read yet (stats_window)
        self.sampler_trained: dict | None = None  # the sampler's state after the last batch trained
        self.start_time = time.time()
        self.stop_signal: str | None = None

    # ---------------------------------------------------------------------------- checkpoint state

    def state(self) -> dict[str, Any]:
        rng = rng_states(self.world)  # a collective: every rank calls state() (through save())
        sampler = self.sampler_trained or self.sampler.state_dict()  # not the position of batches drawn ahead
        stopping = self.early_stopping
        return model_state(
            self.model, self.config, self.tokenizer, step=self.step, epoch=sampler["epoch"],
            optimizer=self.optimizer.state_dict(), scaler=self.scaler.state_dict() if self.scaler else None,
            sampler=sampler, rng=rng[0], rng_ranks=rng,
            progress={"best": stopping.best, "bad_validations": stopping.bad_validations, "elapsed": self.elapsed(),
                      "skipped": self.skipped},
        )  # fmt: skip

    def save(self, reason: str) -> None:
        """checkpoint_<step>.pt (full state), checkpoint_last.pt linked to it; keep the last `keep_last`."""
        self._settle()
        state = self.state()
        if not self.is_main:
            return
        path = save_rotating(state, self.out_dir, step=self.step, keep_last=self.train_cfg.keep_last)
        log.info("saved %s (%s)", path, reason)

    # --------------------------------------------------------------------------------- the loop

    def elapsed(self) -> float:
        return self.elapsed_before + time.time() - self.start_time

    def _batches(self) -> Iterator:
        """(sampler state after the batch, host batch), epoch after epoch, until max_epochs; run by `Prefetcher`,
        on its thread when train.prefetch > 0."""
        from transformer.batching import collate

        split = self.data.splits["train"]
        max_epochs = self.train_cfg.max_epochs
        while not max_epochs or self.sampler.epoch < max_epochs:
            for indices in self.sampler:
                yield self.sampler.state_dict(), collate(split, indices, bucket=self.train_cfg.length_buckets)

    def _install_signal_handlers(self) -> None:
        def handler(signum, frame):
            self.stop_signal = signal.Signals(signum).name

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, handler)

    def run(self, *, final_validation: bool = True) -> dict[str, Any]:
        """Train until a stop condition, holding the run directory's lock (train.lock). `final_validation=False`: no
        off-schedule validation at the end (a run continued in pieces validates as an uninterrupted one would)."""
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            if not self.is_main:
                return self._run(final_validation)
            with RunLock(self.out_dir):
                return self._run(final_validation)
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    def _run(self, final_validation: bool) -> dict[str, Any]:
        cfg = self.train_cfg
        if self.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            save_config(self.config, self.out_dir / "config.yaml")
        self._install_signal_handlers()
        max_time = parse_duration(cfg.max_time) if cfg.max_time else math.inf
        log.info(
            "training %s parameters on %s x%d (%s), %d micro-batches of <= %d tokens per update per device",
            f"{sum(p.numel() for p in self.model.parameters()):,}", self.device, self.world, self.precision,
            self.accumulation, cfg.max_tokens,
        )  # fmt: skip
        # Log lines (validation) go through tqdm.write, so they never land on the bar's line.
        self.tensorboard = TensorBoardLog(self.out_dir / "tensorboard", enabled=cfg.tensorboard and self.is_main)
        bar = training_bar(max_steps=cfg.max_steps, max_time=max_time, step=self.step, elapsed=self.elapsed(),
                           enabled=self.progress)  # fmt: skip
        self.sampler_trained = self.sampler.state_dict()  # from here on the prefetcher's thread moves the sampler
        with logging_redirect_tqdm(), bar, Prefetcher(self._batches(), self.device, depth=cfg.prefetch) as batches:
            reason = self._train_loop(batches, bar, max_time)
        self._settle()
        log.info("stopping at update %d: %s", self.step, reason)
        if final_validation and reason != "patience" and (not cfg.valid_every or self.step % cfg.valid_every):
            self._validate()
        self.save(reason)
        final = {"step": self.step, "reason": reason, "best": self.early_stopping.best, "elapsed": self.elapsed(),
                 "skipped": self.skipped}  # fmt: skip
        if self.is_main:
            plot_run(self.out_dir)
            self.tensorboard.close()
        barrier()
        return final

    def _train_loop(self, batches: Prefetcher, bar: tqdm, max_time: float) -> str:
        """Updates until a stop condition; returns its reason."""
        cfg = self.train_cfg
        last_save, nonfinite, window = time.time(), 0, StatsWindow()
        first_step = self.step + 1
        self.net.train()
        reason = None
        while reason is None:
            drawn = [item for _, item in zip(range(self.accumulation), batches)]
            if not drawn:  # the source is exhausted (the thread is done with the sampler): its final state
                self.sampler_trained = self.sampler.state_dict()
                return "max_epochs"
            micro = [batch for _, batch in drawn]
            stats = training.train_update(
                self.net, micro, self.optimizer, lr=training.learning_rate(self.step + 1, cfg, self.config.model),
                train=cfg, precision=self.precision, scaler=self.scaler, pad_id=self.pad_id,
            )  # fmt: skip
            self.sampler_trained = drawn[-1][0]
            window.add(stats)
            if stats.on_device:  # counted as applied until read (stats_window); read where the count matters
                self.pending.add(stats)
                self.step += 1
                applied = not self._settle() if self._due() else True
            else:
                nonfinite = nonfinite + 1 if stats.nonfinite else 0
                self._check_nan_patience(nonfinite)
                applied = not stats.skipped
                self.step, self.skipped = self.step + applied, self.skipped + (not applied)
            if not applied:  # the schedule, max_steps and the step count advance on applied updates only
                reason = self._stop_reason(max_time)
                continue
            if self.step == first_step:  # start-up cost (docs/benchmarks.md): data, model, the first update
                log.info("first update done %.1f s after the trainer started", time.perf_counter() - self.created)
            if self.step % cfg.log_every == 0:
                self._log_train(window, bar)
            advance(bar, self.step, self.elapsed())
            if cfg.valid_every and self.step % cfg.valid_every == 0 and self._validate():
                reason = "patience"
            reason = reason or self._stop_reason(max_time)
            minutes_due = bool(cfg.save_every_minutes) and any_rank(  # ranks must agree: saving is a collective
                time.time() - last_save >= 60 * cfg.save_every_minutes, self.device
            )
            if reason is None and ((cfg.save_every and self.step % cfg.save_every == 0) or minutes_due):
                self.save("scheduled")
                last_save = time.time()
        return reason

    def _due(self) -> bool:
        """Does something happen at this update count (a log line, validation, checkpoint, max_steps)?"""
        cfg, step = self.train_cfg, self.step
        every = (cfg.log_every, cfg.valid_every, cfg.save_every)
        return any(n and step % n == 0 for n in every) or bool(cfg.max_steps and step >= cfg.max_steps)

    def _settle(self) -> bool:
        """Read the device-decided skips (one sync): take them off the update count, apply nan_patience; True when
        the latest update was skipped."""
        skipped, last, worst = self.pending.read()
        self.step, self.skipped = self.step - skipped, self.skipped + skipped
        self._check_nan_patience(worst)
        return last

    def _check_nan_patience(self, nonfinite: int) -> None:
        if nonfinite >= self.train_cfg.nan_patience:
            raise UserError(
                f"the loss or the gradients were not finite for {nonfinite} updates in a row (after update "
                f"{self.step}): lower the learning rate or lengthen the warmup, clip gradients (train.clip_norm), "
                "or use bf16 instead of fp16"
            )

    def _stop_reason(self, max_time: float) -> str | None:
        reason = None
        if self.stop_signal:
            reason = self.stop_signal
        elif self.train_cfg.max_steps and self.step >= self.train_cfg.max_steps:
            reason = "max_steps"
        elif self.elapsed() >= max_time:
            reason = "max_time"
        if self.world > 1 and any_rank(reason is not None, self.device):
            reason = reason or "another rank stopped"
        return reason

    # ---------------------------------------------------------------------------- logging, validation

    def _write_metrics(self, record: dict[str, Any]) -> None:
        if self.is_main:
            with open(self.out_dir / "metrics.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
            self.tensorboard.log(record)

    def _log_train(self, window: StatsWindow, bar: tqdm) -> None:
        record = {"step": self.step, **window.summary(), "lr": self.optimizer.param_groups[0]["lr"],
                  "elapsed": round(self.elapsed(), 2)}  # fmt: skip
        self._write_metrics(record)
        bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}", wpb=f"{record['wpb']:.0f}",
                        tok_s=f"{record['tok_s']:.0f}")  # fmt: skip
        if not self.progress and self.is_main:
            log.info("update %d %s", self.step, " ".join(f"{k} {v:.4g}" for k, v in record.items() if k != "step"))

    def _validate(self) -> bool:
        """Loss, perplexity and (optionally) greedy BLEU on the validation split; True to stop (patience)."""
        stop = False
        if self.is_main and "valid" in self.data.splits:
            record = {"step": self.step, **validate(self.model, self.data, self.config, self.precision, self.device,
                                                    progress=self.progress)}  # fmt: skip
            self._write_metrics(record)
            plot_run(self.out_dir)
            log.info("validation at update %d: %s", self.step, ", ".join(f"{k} {v:.4g}" for k, v in record.items()
                                                                          if k != "step"))  # fmt: skip
            improved, stop = self.early_stopping.update(record)
            if improved:
                save_checkpoint(model_state(self.model, self.config, self.tokenizer, step=self.step,
                                            valid=record), self.out_dir / "best.pt")  # fmt: skip
        return any_rank(stop, self.device)
