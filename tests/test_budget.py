"""The demo's time budget on a fake clock: what is left, what training gets, the header's wording."""

from __future__ import annotations

import pytest

from transformer.training.budget import TimeBudget, estimate_after_training


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_left_counts_from_the_start_not_from_now():
    clock = FakeClock(1000.0)
    budget = TimeBudget(total=900.0, started=1000.0 - 120.0, clock=clock)  # setup took 2 minutes before us
    assert budget.elapsed() == 120.0 and budget.left() == 780.0
    clock.now += 30.0  # data preparation
    assert budget.elapsed() == 150.0 and budget.left() == 750.0


def test_training_gets_what_is_left_after_the_scoring_estimate():
    clock = FakeClock(50.0)
    budget = TimeBudget(total=900.0, started=0.0, clock=clock)
    # 900 - 50 elapsed - 70 for what follows training = 780 seconds of training
    assert budget.training_seconds(after=70.0) == pytest.approx(780.0)
    clock.now = 845.0  # nearly spent: the minimum, not a negative time
    assert budget.training_seconds(after=70.0, minimum=60.0) == 60.0
    clock.now = 2000.0
    assert budget.left() == 0.0 and budget.training_seconds(after=70.0, minimum=5.0) == 5.0


def test_a_whole_run_on_the_fake_clock_ends_within_the_budget():
    """Setup, data, training as granted, then the estimated scoring: the run ends exactly at the budget."""
    clock = FakeClock(0.0)
    budget = TimeBudget(total=900.0, started=0.0, clock=clock)
    clock.now += 95.0 + 20.0  # setup, data
    after = estimate_after_training(1635, probe_seconds_per_sentence=0.06, valid_sentences=150)
    clock.now += budget.training_seconds(after=after)
    clock.now += after  # scoring takes what was estimated
    assert clock.now == pytest.approx(900.0) and budget.left() == pytest.approx(0.0)


def test_estimate_scales_the_measured_rate_to_the_test_and_validation_sentences():
    # 1.25 * (10 + 0.2 * 0.3 * (1635 + 150)) = 146.375 seconds: the demo's test books and its validation sample
    kwargs = dict(valid_sentences=150, trained_ratio=0.3, fixed=10.0, factor=1.25)
    assert estimate_after_training(1635, probe_seconds_per_sentence=0.2, **kwargs) == pytest.approx(146.375)
    # a probe ten times slower (a busier machine) sets aside ten times the decoding time
    busy = estimate_after_training(1635, probe_seconds_per_sentence=2.0, **kwargs)
    assert busy - 1.25 * 10 == pytest.approx(10 * (146.375 - 1.25 * 10))
    assert estimate_after_training(0, probe_seconds_per_sentence=0.2, fixed=10.0, factor=1.0, minimum=0.0) == 10.0


def test_at_least_a_minute_is_kept_after_training():
    """A fast probe (the idle machine's 0.0187 s per sentence) would keep 30 s; the floor keeps 60."""
    assert estimate_after_training(1635, probe_seconds_per_sentence=0.0187, valid_sentences=150) == 60.0
    assert estimate_after_training(1635, probe_seconds_per_sentence=0.0187, valid_sentences=150, minimum=0.0) < 31.0


@pytest.mark.parametrize(
    ("now", "expected"),
    [(0.0, "15.0 of 15.0 min left"), (330.0, "9.5 of 15.0 min left"), (924.0, "15.0-min budget overrun by 0.4 min")],
)
def test_describe(now, expected):
    assert TimeBudget(total=900.0, started=0.0, clock=FakeClock(now)).describe() == expected


def test_the_update_rate_probe_times_training_and_leaves_the_random_state(tmp_path):
    """A few real updates of the tiny config: a positive rate, and torch's random stream as it was (the run that
    follows must train as if there had been no probe)."""
    import torch

    from transformer.config import load_config
    from transformer.data.prepare import prepare_data
    from transformer.training.budget import update_rates

    config = load_config("tiny", [f"data.cache_dir={tmp_path / 'cache'}"])
    data = prepare_data(config)
    state = torch.get_rng_state()
    rates = update_rates(config, data, torch.device("cpu"), updates=3, rounds=3, warmup=1)
    assert len(rates) == 3 and min(rates) > 0
    assert torch.equal(torch.get_rng_state(), state)
