"""The confidence's calibration (decoding/confidence.py) fitted on a validation set: at the end of training (the
trainer's), after averaging (transformer-average, the recipe) and for any checkpoint (transformer-calibrate).

Decisions:
- The fitting set: the first `lines` validation pairs with a source and a reference, translated with the
  checkpoint's decoding settings, each one's target its sentence chrF / 100 (sacreBLEU's chrF2); and inputs that
  are not the source language, made from the first `NEGATIVES` of those pairs (`not_source_inputs`): each source's
  characters shuffled, each reference as input (the target language), and strings of digits; their target is 0
  (there is no translation to be had). Without them the fit never sees such input: on the demo model a fit without
  the target-language inputs flagged 46% of English test sentences instead of 96% (docs/decoding.md).
- The map: `confidence.fit_logistic` on the four features (sigmoid of a weighted sum; monotone, in [0, 1]).
- The default threshold: the `FLAGGED_SHARE` quantile of the real validation lines' confidences, so that it flags
  that share of translations like the validation set's, and more of inputs unlike them. The synthetic inputs play
  no part in choosing it, and no test set plays any part in the calibration.
- Deterministic: the translations are the search's (no sampling), the synthetic inputs come from a seeded
  generator, and the fit runs in float64.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from transformer.data.tokenizer import EOS_ID
from transformer.decoding.confidence import Calibration, fit_logistic
from transformer.decoding.streaming import StreamingEngine
from transformer.errors import UserError

log = logging.getLogger(__name__)

FLAGGED_SHARE = 0.05  # the default threshold flags this share of the validation lines
NEGATIVES = 200  # inputs that are not the source language, of each kind, at most
KINDS = ("shuffled", "target_language", "digits")  # the kinds of `not_source_inputs`
SHUFFLED_CHARS = 300  # a shuffled source keeps its first this many characters (long ones would be truncated)


def not_source_inputs(sources: Sequence[str], references: Sequence[str], *, seed: int = 1) -> dict[str, list[str]]:
    """Inputs that are not the source language, one of each kind per pair, seeded: each source's characters (its
    first `SHUFFLED_CHARS`) shuffled, each reference itself (the target language), and digits in groups (numbers,
    dates, phone numbers)."""
    rng = random.Random(seed)
    shuffled = []
    for text in sources:
        characters = list(text[:SHUFFLED_CHARS])
        rng.shuffle(characters)
        shuffled.append("".join(characters))
    digits = [
        " ".join("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 10)))
        for _ in sources
    ]
    return {"shuffled": shuffled, "target_language": list(references), "digits": digits}


def feature_rows(translator: StreamingEngine, lines: Sequence[str], progress: Callable[[int], Any] | None = None):
    """Each line's best translation and its features (confidence.FEATURES) as the translator computes them: (texts,
    rows)."""
    best = [hyps[0] for hyps in translator.translate(list(lines), progress=progress)]
    return [t.text for t in best], rows_of(translator, lines, best)


def rows_of(translator: StreamingEngine, lines: Sequence[str], best: Sequence) -> list[list[float]]:
    """The features of each line's translation (a `Translation`), its source ids cut as the translator cuts them."""
    limit = translator.model.max_positions
    sources = translator.tokenizer.encode_src([line.strip() for line in lines])
    sources = [ids if len(ids) <= limit else ids[: limit - 1] + [EOS_ID] for ids in sources]  # as truncate_source
    return [translator.features.row(ids, t.tokens, t.log_prob) for ids, t in zip(sources, best)]


@dataclass(frozen=True, eq=False)
class FittingSet:
    """What a calibration is fitted on: feature rows, their targets, and which kind of input each row is."""

    x: torch.Tensor  # (N, F) float64 features
    y: torch.Tensor  # (N,) float64 targets: chrF / 100 for the real lines, 0 for the others
    kinds: list[str]  # (N,) "real" or one of KINDS
    chrf: list[float]  # the real lines' sentence chrF, in order (they come first)


def fitting_set(
    translator: StreamingEngine,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    lines: int = 1000,
    negatives: int = NEGATIVES,
    progress: Callable[[int], Any] | None = None,
) -> FittingSet:
    """The first `lines` pairs with a source and a reference, and the inputs not in the source language made from
    the first `negatives` of them, translated and turned into feature rows and targets."""
    from transformer.evaluation import sentence_chrf

    pairs = [(s, r) for s, r in zip(sources, references) if s.strip() and r.strip()][:lines]
    if not pairs:
        raise UserError("no validation pairs to calibrate the confidence on (the split is empty)")
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    made = not_source_inputs(sources[:negatives], references[:negatives])
    kinds = ["real"] * len(sources) + [kind for kind in KINDS for _ in made[kind]]
    texts, rows = feature_rows(translator, sources + [line for kind in KINDS for line in made[kind]], progress)
    chrf = sentence_chrf(texts[: len(sources)], references)
    y = [c / 100 for c in chrf] + [0.0] * (len(kinds) - len(sources))
    return FittingSet(torch.tensor(rows, dtype=torch.float64), torch.tensor(y, dtype=torch.float64), kinds, chrf)


def fit(data: FittingSet, *, without: Sequence[str] = ()) -> Calibration:
    """The map fitted on `data` (its rows of the kinds in `without` left out) and its threshold, the
    `FLAGGED_SHARE` quantile of the real lines' confidences."""
    keep = torch.tensor([kind not in without for kind in data.kinds])  # (N,)
    mean, std, weight, bias = fit_logistic(data.x[keep], data.y[keep])
    calibration = Calibration(mean, std, weight, bias, threshold=0.0)
    real = calibration(data.x[: len(data.chrf)])  # (n,)
    threshold = float(torch.quantile(real, FLAGGED_SHARE))
    used = [kind for kind in KINDS if kind not in without]
    about = (
        f"fitted on {len(data.chrf)} validation lines (sentence chrF / 100) and {int(keep.sum()) - len(data.chrf)} "
        f"inputs not in the source language ({', '.join(used) or 'none'}: 0); Spearman with chrF on them "
        f"{spearman(real.tolist(), data.chrf):.3f}; the threshold flags {FLAGGED_SHARE:.0%} of them"
    )
    return replace(calibration, threshold=threshold, about=about)


def calibrate(
    translator: StreamingEngine,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    lines: int = 1000,
    negatives: int = NEGATIVES,
    progress: Callable[[int], Any] | None = None,
) -> Calibration:
    """The calibration of the translator's model on validation pairs (see the module docstring)."""
    data = fitting_set(translator, sources, references, lines=lines, negatives=negatives, progress=progress)
    calibration = fit(data)
    log.info("confidence calibrated: threshold %.4f; %s", calibration.threshold, calibration.about)
    return calibration


def calibrate_state(
    state: dict[str, Any],
    config,
    *,
    lines: int = 1000,
    device: str | torch.device = "cpu",
    progress: Callable[[int], Any] | None = None,
) -> dict[str, Any]:
    """A checkpoint dict with its `confidence` entry (re)fitted on the first `lines` pairs of `config`'s
    data.valid, translated with `config.decode`."""
    from transformer.checkpoint import build_model
    from transformer.data.corpus import load_pairs

    if config.data.valid is None:
        raise UserError(
            "the config has no data.valid split to calibrate the confidence on: give --config with one, or "
            "--set data.valid.tsv=FILE"
        )
    sources, references = load_pairs(config.data.valid, config.data)
    model, tokenizer, _ = build_model(state, device)
    translator = StreamingEngine(model, tokenizer, config.decode, device=device)
    calibration = calibrate(translator, sources, references, lines=lines, progress=progress)
    return {**state, "confidence": calibration.to_state()}


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson's over the ranks, tied values sharing their mean rank."""
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = float((rx.square().sum() * ry.square().sum()).sqrt())
    return float((rx * ry).sum()) / denominator if denominator else 0.0


def _ranks(values: Sequence[float]) -> torch.Tensor:
    """(N,) float64 ranks from 0, ties given their mean rank."""
    v = torch.tensor(list(values), dtype=torch.float64)
    unique, inverse = torch.unique(v, return_inverse=True)  # sorted unique values; each value's place among them
    counts = torch.bincount(inverse, minlength=len(unique)).double()  # (U,)
    first = torch.cumsum(counts, 0) - counts  # (U,) the rank of each unique value's first copy
    return (first + (counts - 1) / 2)[inverse]
