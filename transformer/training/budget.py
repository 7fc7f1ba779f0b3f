"""A wall-time budget for a whole run, setup to scores: how much is left, how long training may take, and how many
updates that buys on this machine.

`make demo` promises to finish within its budget (15 minutes) counted from before `make setup`: setup, data
preparation, training and scoring together. Training is the stretchable part, so it gets what is left once the
work that follows it (the final validation, loading the checkpoint, beam search over the test split, scoring) has
been estimated (beam search timed on a sample of the test split, on this machine, now) and set aside.

    budget = TimeBudget(total=900.0, started=start_of_make_demo)
    seconds = budget.training_seconds(after=estimate_after_training(1635, probe_seconds_per_sentence=0.06))
    expected_updates = statistics.median(update_rates(config, data, device)) * seconds
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# What follows training in `make demo`: the trainer's final validation (loss on the dev books, greedy BLEU on a
# sample of them), saving, loading, beam search over the test split, scoring. Beam search dominates, and its speed
# depends on the machine and on how busy others keep it (a shared machine can be many times slower than an idle
# one), so it is measured, not assumed: the demo times beam search with the untrained model over a sample of test
# sentences before training. An untrained model never ends a sentence early, so that rate is scaled by
# TRAINED_RATIO, a trained model's time per sentence over the probe's, rounded up (its measurement:
# docs/benchmarks.md#the-time-set-aside-after-training).
TRAINED_RATIO = 0.3  # beam-search time per sentence of a trained model / of the untrained probe
AFTER_TRAINING_FIXED_S = 10.0  # checkpoint save and load, plotting, the validation loss pass
SAFETY_FACTOR = 1.5  # the load may grow while training runs; 1.25 left a busy run 0.4 min over (benchmarks)
MIN_TRAINING_S = 60.0  # train at least this long even when the budget is already spent
# Keep at least this much after training: on an idle machine the probe's rate alone set aside barely more than the
# final validation and scoring took, and the demo ended just inside its budget (the run:
# docs/benchmarks.md#the-time-set-aside-after-training).
MIN_AFTER_TRAINING_S = 60.0


def estimate_after_training(
    test_sentences: int,
    *,
    probe_seconds_per_sentence: float,
    valid_sentences: int = 0,
    trained_ratio: float = TRAINED_RATIO,
    fixed: float = AFTER_TRAINING_FIXED_S,
    factor: float = SAFETY_FACTOR,
    minimum: float = MIN_AFTER_TRAINING_S,
) -> float:
    """Seconds to set aside after training, at least `minimum`:
    factor * (fixed + probe_seconds_per_sentence * trained_ratio * (test_sentences + valid_sentences)).

    `probe_seconds_per_sentence` is measured now, on this machine (beam search by the untrained model over a sample
    of the test split); the validation's greedy decoding is counted at the beam-search rate, an overestimate.
    """
    return max(
        minimum, factor * (fixed + probe_seconds_per_sentence * trained_ratio * (test_sentences + valid_sentences))
    )


@dataclass
class TimeBudget:
    """`total` seconds from the clock reading `started`; `clock` is injectable so tests need no real time."""

    total: float  # seconds for everything, counted from `started`
    started: float  # clock reading at the start (e.g. before `make setup`)
    clock: Callable[[], float] = field(default=time.time)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def left(self) -> float:
        """Seconds left, never below zero."""
        return max(self.total - self.elapsed(), 0.0)

    def training_seconds(self, *, after: float, minimum: float = MIN_TRAINING_S) -> float:
        """What training may take: the time left less `after` (what follows training), at least `minimum`."""
        return max(self.left() - after, minimum)

    def describe(self) -> str:
        """'12.3 of 15.0 min left' (or '... overrun by 0.4 min' once past the budget)."""
        over = self.elapsed() - self.total
        if over > 0:
            return f"{self.total / 60:.1f}-min budget overrun by {over / 60:.1f} min"
        return f"{self.left() / 60:.1f} of {self.total / 60:.1f} min left"


def update_rates(config, data, device, *, updates: int = 16, rounds: int = 3, warmup: int = 4) -> list[float]:
    """Training updates per second of `config` on this machine, now, in `rounds` readings: a scratch model trained
    `warmup` untimed updates, then `rounds` rounds of `updates` updates each timed on their own, on batches of the
    train split (`data`, as `prepare_data` gives it; each round on new batches). Take the median: one reading can
    be off by a fifth on a machine whose speed wanders (two runs' readings: docs/benchmarks.md#the-update-rate-probe).
    The random state is restored afterwards, so the run that follows trains as if there had been no probe."""
    import torch

    from transformer.data.batching import collate
    from transformer.data.tokenizer import PAD_ID
    from transformer.model import Transformer
    from transformer.precision import resolve_precision
    from transformer.training import optim
    from transformer.training.setup import make_sampler

    cfg = config.train
    precision = resolve_precision(cfg.precision, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda device: None
    rates = []
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        vocab = dict(src_vocab_size=data.tokenizer.src_vocab_size, tgt_vocab_size=data.tokenizer.tgt_vocab_size)
        model = Transformer.from_config(config.model, **vocab, pad_id=PAD_ID).to(device)
        optimizer = optim.make_optimizer(model, cfg)
        scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
        sampler, accumulation = make_sampler(config, data, 0, 1)
        batches = ((data.train_split(epoch), batch) for epoch in itertools.count() for batch in sampler)
        for i in range(warmup + rounds * updates):
            if i >= warmup and (i - warmup) % updates == 0:
                sync(device)
                start = time.perf_counter()
            micro = [collate(*next(batches)).to(device) for _ in range(accumulation)]
            optim.train_update(
                model,
                micro,
                optimizer,
                lr=optim.learning_rate(i + 1, cfg, config.model),
                train=cfg,
                precision=precision,
                scaler=scaler,
                pad_id=PAD_ID,
            )
            if i >= warmup and (i - warmup) % updates == updates - 1:
                sync(device)
                rates.append(updates / (time.perf_counter() - start))
    return rates
