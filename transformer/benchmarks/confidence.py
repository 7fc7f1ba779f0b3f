"""The confidence measured on a test set (scripts/benchmark_confidence.py), with the checkpoint's calibration:

- Ranking: Spearman's correlation of the confidence with each test line's sentence chrF, beside that of the raw
  mean log-probability per token (the model's own score, the baseline), over the test lines.
- Flags: the share of test lines whose confidence is below the checkpoint's default threshold, and the same share
  of inputs that are not the source language made from the test lines as the calibration makes them from the
  validation lines (training/calibration.py: shuffled characters, the reference side, digits). Beside them the
  baseline: the raw mean log-probability with its own threshold, its `FLAGGED_SHARE` quantile on the validation
  lines.
- Each kind held out: the validation set's fitting set is made again, and the map refitted without one kind's
  inputs, then that kind's test inputs flagged by the refit's own threshold: how the confidence does on a kind of
  input its calibration never saw.
- Reliability: the test lines in five bins of confidence, each bin's mean confidence beside its mean chrF / 100.
- Time: the translation of the test lines, and the features and map over them, the confidence's own cost.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from transformer.decoding.confidence import FEATURES, Calibration
from transformer.evaluation import sentence_chrf
from transformer.training.calibration import (
    FLAGGED_SHARE,
    KINDS,
    FittingSet,
    feature_rows,
    fit,
    not_source_inputs,
    rows_of,
    spearman,
)

BINS = 5  # reliability bins, by confidence quantiles of the test lines


def share_below(values: Sequence[float], threshold: float) -> float:
    """The share of `values` strictly below `threshold` (4 decimals)."""
    return round(sum(1 for v in values if v < threshold) / len(values), 4) if values else 0.0


def reliability(confidence: Sequence[float], chrf: Sequence[float], bins: int = BINS) -> list[dict]:
    """The lines sorted by confidence and cut into `bins` bins of (nearly) equal size: each bin's lines, mean
    confidence and mean chrF / 100."""
    order = sorted(range(len(confidence)), key=lambda i: confidence[i])
    cuts = [round(b * len(order) / bins) for b in range(bins + 1)]
    groups = [order[lo:hi] for lo, hi in zip(cuts[:-1], cuts[1:]) if hi > lo]
    return [
        {
            "lines": len(group),
            "confidence": round(sum(confidence[i] for i in group) / len(group), 4),
            "chrf": round(sum(chrf[i] / 100 for i in group) / len(group), 4),
        }
        for group in groups
    ]


def _mean_log_probs(rows: list[list[float]]) -> list[float]:
    return [row[FEATURES.index("mean_log_prob")] for row in rows]


def measure(
    translator,
    calibration: Calibration,
    test: tuple[Sequence[str], Sequence[str]],
    valid: FittingSet,
    *,
    negatives: int = 0,
) -> dict:
    """The module docstring's measures. translator: decoding/streaming.py's, with `calibration`; test: (sources,
    references); valid: the validation set's fitting set (calibration.fitting_set); negatives: test lines made into
    inputs of each kind (0: all)."""
    sources, references = test
    start = time.perf_counter()
    best = [hyps[0] for hyps in translator.translate(list(sources))]
    translating, start = time.perf_counter() - start, time.perf_counter()
    rows = rows_of(translator, sources, best)  # the source encoded again: an upper bound of the confidence's cost
    confidence = calibration(torch.tensor(rows, dtype=torch.float64)).tolist()
    featuring = time.perf_counter() - start
    chrf = sentence_chrf([t.text for t in best], references)
    made = not_source_inputs(sources[: negatives or len(sources)], references[: negatives or len(sources)], seed=7)
    other = {kind: feature_rows(translator, made[kind])[1] for kind in KINDS}
    baseline_threshold = float(
        torch.quantile(valid.x[: len(valid.chrf), FEATURES.index("mean_log_prob")], FLAGGED_SHARE)
    )
    held_out = {kind: fit(valid, without=[kind]) for kind in KINDS}
    mapped = lambda c, found: c(torch.tensor(found, dtype=torch.float64)).tolist()
    return {
        "test_lines": len(sources),
        "inputs_per_kind": {kind: len(made[kind]) for kind in KINDS},
        "threshold": round(calibration.threshold, 4),
        "spearman_with_chrf": {
            "confidence": round(spearman(confidence, chrf), 4),
            "mean_log_prob": round(spearman(_mean_log_probs(rows), chrf), 4),
        },
        "flagged": {
            "test_lines": share_below(confidence, calibration.threshold),
            **{kind: share_below(mapped(calibration, other[kind]), calibration.threshold) for kind in KINDS},
        },
        "flagged_by_mean_log_prob": {
            "threshold": round(baseline_threshold, 4),
            "test_lines": share_below(_mean_log_probs(rows), baseline_threshold),
            **{kind: share_below(_mean_log_probs(other[kind]), baseline_threshold) for kind in KINDS},
        },
        "flagged_when_held_out_of_the_fit": {
            kind: share_below(mapped(held_out[kind], other[kind]), held_out[kind].threshold) for kind in KINDS
        },
        "reliability": reliability(confidence, chrf),
        "mean_test_chrf": round(sum(chrf) / len(chrf), 2),
        "seconds": {"translate": round(translating, 2), "features_and_map": round(featuring, 4)},
    }
