"""Early stopping: the best score and the patience count, on scores written out by hand."""

from __future__ import annotations

import pytest

from transformer.training.validation import EarlyStopping


def test_patience_counts_validations_since_the_best_and_resets_on_improvement():
    """BLEU 10, 9, 12, 11, 11 with patience 2: 10 and 12 improve; the stop comes at the second validation after 12."""
    stopping = EarlyStopping(patience=2, best_metric="bleu")
    outcomes = [stopping.update({"valid_bleu": b, "valid_loss": 1.0}) for b in (10, 9, 12, 11, 11)]
    assert outcomes == [(True, False), (False, False), (True, False), (False, False), (False, True)]
    assert (stopping.best, stopping.bad_validations) == (12, 2)


@pytest.mark.parametrize(
    ("best_metric", "record", "score"),
    [
        ("loss", {"valid_loss": 2.5, "valid_bleu": 30.0}, -2.5),  # lower loss is better: the score is its negative
        ("bleu", {"valid_loss": 2.5, "valid_bleu": 30.0}, 30.0),
        ("bleu", {"valid_loss": 2.5}, -2.5),
    ],  # BLEU not measured (train.valid_bleu off): the loss decides
)
def test_score_is_bleu_when_chosen_and_measured_else_minus_loss(best_metric, record, score):
    assert EarlyStopping(patience=1, best_metric=best_metric).score(record) == score


def test_patience_zero_never_stops():
    stopping = EarlyStopping(patience=0, best_metric="loss")
    assert [stopping.update({"valid_loss": loss})[1] for loss in (1.0, 2.0, 3.0, 4.0)] == [False] * 4
    assert stopping.bad_validations == 3
