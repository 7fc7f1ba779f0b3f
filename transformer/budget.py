"""A wall-time budget for a whole run, setup to scores: how much is left, and how long training may take.

`make demo` promises to finish within its budget (15 minutes) counted from before `make setup`: setup, data
preparation, training and scoring together. Training is the stretchable part, so it gets what is left once the
work that follows it (the final validation, loading the checkpoint, beam search over the test split, scoring) has
been estimated and set aside.

    budget = TimeBudget(total=900.0, started=start_of_make_demo)
    seconds = budget.training_seconds(after=estimate_after_training(test_sentences=1635))
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

# What follows training in `make demo`, measured on the 2-core AMD EPYC CPU (docs/benchmarks.md, README): the
# trainer's final validation, save and plot took about 6 s; `transformer-evaluate` of the demo model (load, beam 4
# over the 1,635 test verses, scoring) 22.5 to 23.3 s in all, i.e. about 14 ms per test sentence.
AFTER_TRAINING_FIXED_S = 10.0  # final validation, checkpoint save and load, plotting, start-up of the scoring
AFTER_TRAINING_PER_SENTENCE_S = 0.014  # beam-4 decoding and scoring, per test sentence
SHARED_MACHINE_FACTOR = 2.0  # others' jobs on the same cores slow every stage; the estimate is scaled by this
MIN_TRAINING_S = 60.0  # train at least this long even when the budget is already spent


def estimate_after_training(
    test_sentences: int,
    *,
    fixed: float = AFTER_TRAINING_FIXED_S,
    per_sentence: float = AFTER_TRAINING_PER_SENTENCE_S,
    factor: float = SHARED_MACHINE_FACTOR,
) -> float:
    """Seconds to set aside for the work after training: factor * (fixed + per_sentence * test_sentences)."""
    return factor * (fixed + per_sentence * test_sentences)


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
