"""The training driver: data, model, optimizer and devices wired around `training.train_update`, with
validation, early stopping, checkpoints, exact resume, signals and progress. One process per device; under
`torchrun` the processes form a DDP group and rank 0 alone logs and writes.
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

import numpy as np
import torch
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from transformer import training
from transformer.checkpoint import load_checkpoint, load_weights, model_state, save_checkpoint, save_rotating
from transformer.config import Config, parse_duration, save_config
from transformer.distributed import (
    any_rank,
    barrier,
    init_distributed,
    prepare_group,
    restore_rng_states,
    rng_states,
    seed_everything,
)
from transformer.errors import UserError
from transformer.feedback import TensorBoardLog, advance, training_bar
from transformer.fileio import RunLock
from transformer.plotting import plot_run
from transformer.prefetch import Prefetcher
from transformer.stats_window import PendingSkips, StatsWindow

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------- the trainer


class Trainer:
    """Holds the run's state; `run()` trains until a stop condition and returns the final metrics."""

    def __init__(self, config: Config, *, resume: bool | str = False, progress: bool = True) -> None:
        from transformer.batching import TokenBatchSampler
        from transformer.model import Transformer
        from transformer.tokenizer import PAD_ID

        self.created = time.perf_counter()
        self.config, self.train_cfg = config, config.train
        if config.data.max_tokens_per_sentence > config.model.max_positions:
            raise UserError(
                f"data.max_tokens_per_sentence ({config.data.max_tokens_per_sentence}) exceeds model.max_positions "
                f"({config.model.max_positions}): such sentences do not fit the positional encoding; lower the first "
                "or raise the second"
            )
        self.rank, self.world, self.device = init_distributed()
        self.is_main = self.rank == 0
        self.precision = training.resolve_precision(self.train_cfg.precision, self.device)  # before any work
        self.out_dir = Path(self.train_cfg.out_dir)
        if self.is_main:
            RunLock(self.out_dir).check()  # refuse a busy run directory now; run() takes the lock
        self.progress = progress and self.is_main
        if self.train_cfg.threads:
            torch.set_num_threads(self.train_cfg.threads)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        seed_everything(self.train_cfg.seed)

        self.data = self._prepare_data()
        self.tokenizer, self.pad_id = self.data.tokenizer, PAD_ID
        train_split = self.data.splits["train"]
        self.sampler = TokenBatchSampler(
            train_split.src_lengths, train_split.tgt_lengths, max_tokens=self.train_cfg.max_tokens,
            seed=self.train_cfg.seed, rank=self.rank, world_size=self.world, buckets=self.train_cfg.length_buckets,
        )  # fmt: skip
        mean_tokens = float(np.sum(train_split.tgt_lengths)) / max(len(self.sampler) * self.world, 1)
        self.accumulation = self.train_cfg.accumulation or training.micro_batch_count(
            self.train_cfg.update_tokens, mean_tokens, self.world
        )
        too_big = training.update_size_warning(self.train_cfg.update_tokens, self.train_cfg.max_tokens, mean_tokens,
                                               self.world, self.accumulation)  # fmt: skip
        if too_big and self.is_main:
            log.warning(too_big)

        self.model = Transformer.from_config(
            config.model, src_vocab_size=self.tokenizer.src_vocab_size,
            tgt_vocab_size=self.tokenizer.tgt_vocab_size, pad_id=PAD_ID,
        ).to(self.device)  # fmt: skip
        self.optimizer = training.make_optimizer(self.model, self.train_cfg)
        self.scaler = torch.amp.GradScaler(self.device.type) if self.precision == "fp16" else None
        self.step, self.best, self.bad_validations, self.skipped = 0, None, 0, 0
        self.pending = PendingSkips()  # skip flags decided on the device, not read yet (stats_window)
        self.sampler_trained: dict | None = None  # the sampler's state after the last batch trained
        self.start_time, self.elapsed_before = time.time(), 0.0
        if resume:
            self._resume(self.out_dir / "checkpoint_last.pt" if resume is True else Path(resume))
        elif self.train_cfg.init_from:
            self._load_weights(Path(self.train_cfg.init_from))
        self.net = self.model
        if self.train_cfg.compile:
            self.net = torch.compile(self.net)
        if self.world > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.net = torch.nn.parallel.DistributedDataParallel(self.net, device_ids=ids)
        self.stop_signal: str | None = None

    def _prepare_data(self):
        """Rank 0 trains the tokenizer and fills the cache while the others wait (with their own timeout, as this
        can take longer than the process group's), then read it; evaluation splits lose pairs too long to fit."""
        from transformer.data import drop_longer, prepare_data

        group = prepare_group(parse_duration(self.train_cfg.prepare_timeout)) if self.world > 1 else None
        data = prepare_data(self.config, progress=self.progress) if self.is_main else None
        barrier(group)
        data = data or prepare_data(self.config, progress=False)
        if "train" not in data.splits:
            raise UserError("the config has no data.train split to train on")
        for name in ("valid", "test"):
            if name in data.splits:
                data.splits[name] = drop_longer(data.splits[name], self.config.model.max_positions, name)
                if not len(data.splits[name]):
                    del data.splits[name]  # nothing fits: no validation rather than a crash
        return data

    # ---------------------------------------------------------------------------- checkpoint state

    def state(self) -> dict[str, Any]:
        rng = rng_states(self.world)  # a collective: every rank calls state() (through save())
        sampler = self.sampler_trained or self.sampler.state_dict()  # not the position of batches drawn ahead
        return model_state(
            self.model, self.config, self.tokenizer, step=self.step, epoch=sampler["epoch"],
            optimizer=self.optimizer.state_dict(), scaler=self.scaler.state_dict() if self.scaler else None,
            sampler=sampler, rng=rng[0], rng_ranks=rng,
            progress={"best": self.best, "bad_validations": self.bad_validations, "elapsed": self.elapsed(),
                      "skipped": self.skipped},
        )  # fmt: skip

    def _load_weights(self, path: Path) -> dict[str, Any]:
        from transformer.checkpoint import check_vocabulary

        state = load_checkpoint(path, map_location="cpu")
        check_vocabulary(state, self.tokenizer.src_vocab_size, self.tokenizer.tgt_vocab_size)
        load_weights(self.model, state["model"], str(path))
        return state

    def _resume(self, path: Path) -> None:
        from transformer.checkpoint import require_training_state

        state = self._load_weights(path)
        require_training_state(state, path)
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.sampler.load_state_dict(state["sampler"])
        restore_rng_states(state, self.rank, self.world)
        self.step = state["step"]
        progress = state["progress"]
        self.best, self.bad_validations, self.elapsed_before = (
            progress["best"], progress["bad_validations"], progress["elapsed"],
        )  # fmt: skip
        self.skipped = progress.get("skipped", 0)
        log.info("resumed from %s at update %d (epoch %d)", path, self.step, self.sampler.epoch)

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
        final = {"step": self.step, "reason": reason, "best": self.best, "elapsed": self.elapsed(),
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
            use_bleu = self.train_cfg.best_metric == "bleu" and "valid_bleu" in record
            value = record["valid_bleu"] if use_bleu else -record["valid_loss"]
            if self.best is None or value > self.best:
                self.best, self.bad_validations = value, 0
                save_checkpoint(model_state(self.model, self.config, self.tokenizer, step=self.step,
                                            valid=record), self.out_dir / "best.pt")  # fmt: skip
            else:
                self.bad_validations += 1
                stop = bool(self.train_cfg.patience) and self.bad_validations >= self.train_cfg.patience
        return any_rank(stop, self.device)


def validate(model, data, config: Config, precision: str, device: torch.device, progress: bool = False):
    """valid_loss, valid_nll, valid_ppl, and valid_bleu (greedy, on a sample) when configured."""
    from transformer.batching import TokenBatchSampler, collate

    split = data.splits["valid"]
    sampler = TokenBatchSampler(split.src_lengths, split.tgt_lengths, max_tokens=config.train.max_tokens, seed=0,
                                shuffle=False)  # fmt: skip
    batches = (collate(split, indices).to(device) for indices in sampler)
    loss, nll = training.evaluate_loss(model, batches, precision=precision, pad_id=model.pad_id,
                                       epsilon=config.train.label_smoothing)  # fmt: skip
    record = {"valid_loss": loss, "valid_nll": nll, "valid_ppl": math.exp(min(nll, 50.0))}
    if config.train.valid_bleu and split.src_text is not None:
        from transformer.evaluation import corpus_scores
        from transformer.translator import Translator

        n = config.train.valid_bleu_sentences or len(split)
        decode = config.replace("decode", beam_size=1, nbest=1, sampling=False).decode
        translator = Translator(model, data.tokenizer, decode, device=device, precision=precision)
        with tqdm(total=min(n, len(split)), desc="validation decoding", leave=False, disable=not progress) as bar:
            hypotheses = [r[0].text for r in translator.translate(split.src_text[:n], progress=bar.update)]
        record["valid_bleu"] = corpus_scores(hypotheses, list(split.tgt_text[:n]))["bleu"]
        model.train()
    return record
