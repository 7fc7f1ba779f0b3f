"""The update count: skipped updates leave the count (and so the schedule) behind, on the host and on the device."""

from __future__ import annotations

import pytest
import torch

from transformer.errors import UserError
from transformer.training.optim import UpdateStats
from transformer.training.stats_window import UpdateCount


def _stats(skipped: bool, nonfinite: bool, on_device: bool) -> UpdateStats:
    flag = (lambda v: torch.tensor(v)) if on_device else (lambda v: v)
    return UpdateStats(loss=1.0, nll=1.0, tokens=10, grad_norm=1.0, skipped=flag(skipped), nonfinite=flag(nonfinite))


def test_host_decided_skips_count_at_once():
    """Applied, skipped, applied from update 5 (a resumed run): 7 applied, 1 skipped."""
    count = UpdateCount(step=5, skipped=0, nan_patience=3)
    applied = [count.add(_stats(s, False, False), due=lambda step: True) for s in (False, True, False)]
    assert applied == [True, False, True] and (count.step, count.skipped) == (7, 1)


def test_device_decided_skips_count_as_applied_until_a_due_step_reads_them():
    """Three updates, the second skipped, the count exact only at step 3: 1 and 2 look applied, then the read at
    the third takes the skip off (step 2, 1 skipped) and reports the third itself as applied."""
    count = UpdateCount(step=0, skipped=0, nan_patience=3)
    applied = [count.add(_stats(s, False, True), due=lambda step: step == 3) for s in (False, True, False)]
    assert applied == [True, True, True] and (count.step, count.skipped) == (2, 1)


@pytest.mark.parametrize("on_device", [False, True])
def test_nan_patience_non_finite_updates_in_a_row_abort(on_device):
    """nan_patience 2: a finite update between two non-finite ones resets the run; two in a row abort."""
    count = UpdateCount(step=0, skipped=0, nan_patience=2)
    for nonfinite in (True, False, True):
        count.add(_stats(nonfinite, nonfinite, on_device), due=lambda step: True)
    with pytest.raises(UserError, match="not finite for 2 updates in a row"):
        count.add(_stats(True, True, on_device), due=lambda step: True)
