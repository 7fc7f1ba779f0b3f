"""A confidence in [0, 1] for every translation: four features of the line, read off the search's result and the
source, mapped by a logistic calibration fitted on the validation set (training/calibration.py fits it; the
method and its measurements: docs/decoding.md, "Confidence").

Legend: N lines (hypotheses), F features.

Decisions:
- The features (`FEATURES`), per hypothesis, from what the search already returned and the source ids, with no
  forward pass of their own: the mean log-probability per output token (log P / (pieces + 1), EOS counted: the
  model's own score, the baseline), |log(output tokens / source tokens)| (too short or too long), the share of
  source pieces that are one character or `<unk>` (input that is not the source language, shuffled characters or
  digits, breaks into such pieces), and the share of output pieces that are also source pieces (a copy: input
  already in the target language). Each is clipped to a finite range (`LIMITS`): a -inf log-probability (a line
  whose controls conflicted) is a very low one. The lowest token log-probability and the spread of the token
  log-probabilities were measured and left out: on the demo model they took weights near 0 and changed nothing.
- The map: confidence = sigmoid(w . (x - mean) / std + b), the mean and std of the fitting set's features;
  monotone in each feature (the sign of its weight), always in [0, 1]. `fit_logistic` fits w and b by Newton's
  method on the cross-entropy against targets in [0, 1] (training/calibration.py: sentence chrF / 100, 0 for input
  that is not the source language), a convex problem with a small ridge, in float64: the same data, the same map.
- Stored in a checkpoint as `confidence` (`Calibration.to_state`): tensors, floats and strings only, so
  `torch.load(weights_only=True)` reads it. Without one (an older checkpoint, or an ensemble, whose features are
  no one model's) the confidence is `UNCALIBRATED`: exp(mean log-probability), the geometric mean of the output
  tokens' probabilities, and there is no default threshold.
- An empty input line has confidence 1: its empty translation is exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from transformer.data.tokenizer import UNK_ID

FEATURES = ("mean_log_prob", "length_ratio", "source_short_share", "copied_share")
LIMITS = ((-30.0, 0.0), (0.0, 5.0), (0.0, 1.0), (0.0, 1.0))  # each feature's [low, high], in FEATURES' order
UNCALIBRATED = "uncalibrated: exp(mean log-probability per token)"


class LineFeatures:
    """`FEATURES` of translations, for one tokenizer: which source ids are short pieces is read once."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.joint = tokenizer.joint  # one id space: a copied piece has the same id on both sides
        self.short = [_is_short(tokenizer.src_piece(i)) or i == UNK_ID for i in range(tokenizer.src_vocab_size)]

    def row(self, source_ids: Sequence[int], tokens: Sequence[int], log_prob: float) -> list[float]:
        """One hypothesis's features: its source ids (pieces + EOS, as the encoder read them), output ids (no BOS or
        EOS) and log P (EOS included when it finished)."""
        pieces = list(source_ids[:-1]) or [UNK_ID]  # EOS left out
        output = len(tokens) + 1
        values = (
            log_prob / output if log_prob == log_prob else -math.inf,  # NaN as -inf
            abs(math.log(output / (len(pieces) + 1))),
            sum(self.short[i] for i in pieces) / len(pieces),
            self._copied(pieces, tokens),
        )
        return [min(max(v, low), high) for v, (low, high) in zip(values, LIMITS)]

    def _copied(self, pieces: list[int], tokens: Sequence[int]) -> float:
        if not tokens:
            return 0.0
        if self.joint:
            source = set(pieces)
            return sum(1 for t in tokens if t in source) / len(tokens)
        source = {self.tokenizer.src_piece(i) for i in pieces}
        return sum(1 for t in tokens if self.tokenizer.tgt_piece(t) in source) / len(tokens)


def _is_short(piece: str) -> bool:
    """One character or none (the word-start mark left out), or a byte-fallback piece such as <0x31>."""
    return len(piece.replace("\u2581", "")) <= 1 or (piece.startswith("<0x") and piece.endswith(">"))


@dataclass(frozen=True, eq=False)
class Calibration:
    """The map from `FEATURES` to a confidence, and the default threshold of --min-confidence."""

    mean: torch.Tensor  # (F,) float64: the fitting set's feature means
    std: torch.Tensor  # (F,) float64: their standard deviations (at least 1e-6)
    weight: torch.Tensor  # (F,) float64: w of the standardised features
    bias: float  # b
    threshold: float  # the default --min-confidence, chosen on the validation set (training/calibration.py)
    about: str = ""  # what it was fitted on, in words

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, F) features -> (N,) float64 confidences in [0, 1]."""
        z = (x.double() - self.mean.double()) / self.std.double()  # (N, F)
        return torch.sigmoid(z @ self.weight.double() + self.bias)  # (N,)

    def to_state(self) -> dict:
        """A checkpoint's `confidence` entry: tensors, floats and strings (weights_only)."""
        tensors = {"mean": self.mean, "std": self.std, "weight": self.weight}
        return {
            "features": list(FEATURES),
            **{name: t.detach().clone().double() for name, t in tensors.items()},
            "bias": float(self.bias),
            "threshold": float(self.threshold),
            "about": self.about,
        }

    @classmethod
    def from_state(cls, state: dict | None) -> Calibration | None:
        """A checkpoint's `confidence` entry back; None without one, or with other features (another version's)."""
        if not isinstance(state, dict) or tuple(state.get("features", ())) != FEATURES:
            return None
        parts = (torch.as_tensor(state[k], dtype=torch.float64) for k in ("mean", "std", "weight"))
        return cls(*parts, float(state["bias"]), float(state["threshold"]), str(state.get("about", "")))


def confidences(rows: list[list[float]], calibration: Calibration | None) -> list[float]:
    """Feature rows -> confidences: the calibration's map, or without one `UNCALIBRATED`."""
    if not rows:
        return []
    x = torch.tensor(rows, dtype=torch.float64)  # (N, F)
    if calibration is None:
        return x[:, FEATURES.index("mean_log_prob")].exp().tolist()
    return calibration(x).tolist()


def read_calibration(paths: Sequence[str | Path]) -> Calibration | None:
    """The calibration stored in a checkpoint; None without one, and for several checkpoints (an ensemble)."""
    from transformer.checkpoint import load_checkpoint

    if len(paths) != 1:
        return None
    return Calibration.from_state(load_checkpoint(paths[0], mmap=True).get("confidence"))


def fit_logistic(x: torch.Tensor, y: torch.Tensor, *, ridge: float = 1e-3, steps: int = 100):
    """x (N, F) features, y (N,) targets in [0, 1] -> (mean, std, weight, bias) minimising the mean cross-entropy
    -y log p - (1 - y) log(1 - p), p = sigmoid(w . z + b), z the standardised x, plus ridge/2 |w|^2: Newton's
    method with step halving, in float64."""
    x, y = x.double(), y.double()
    mean, std = x.mean(dim=0), x.std(dim=0, correction=0).clamp_min(1e-6)  # (F,)
    z = torch.cat([(x - mean) / std, torch.ones(len(x), 1, dtype=torch.float64)], dim=1)  # (N, F+1)
    penalty = torch.full((z.size(1),), ridge, dtype=torch.float64)
    penalty[-1] = 0.0  # the bias is not shrunk

    def loss(w: torch.Tensor) -> float:
        entropy = torch.nn.functional.binary_cross_entropy_with_logits(z @ w, y)
        return float(entropy + 0.5 * (penalty * w * w).sum())

    w = torch.zeros(z.size(1), dtype=torch.float64)
    for _ in range(steps):
        p = torch.sigmoid(z @ w)  # (N,)
        grad = z.T @ (p - y) / len(y) + penalty * w  # (F+1,)
        hessian = (z.T * (p * (1 - p))) @ z / len(y) + torch.diag(penalty) + 1e-9 * torch.eye(len(w))
        step, now, scale = torch.linalg.solve(hessian, grad), loss(w), 1.0
        while loss(w - scale * step) > now and scale > 1e-6:
            scale /= 2
        w = w - scale * step
        if float((scale * step).abs().max()) < 1e-10:
            break
    return mean, std, w[:-1].clone(), float(w[-1])
