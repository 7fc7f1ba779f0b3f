"""What every search shares (search.py's greedy and sampling, beam.py's beam search): the hypothesis it returns, the
length penalty, each sentence's maximum output length, the first step's cache, and one step's next-token
log-probabilities.

Legend: B batch (sentences), S source length, V vocabulary, N rows (B, or B*K in beam search), t tokens decoded so far.

Decisions (the paper: beam 4, alpha 0.6, maximum length input + 50):
- Maximum output length, per sentence: floor(max_len_a * S + max_len_b) tokens, S the real (unpadded) source
  length in tokens (its EOS included), capped at `model.max_positions - 1`. The cap counts output tokens without
  EOS; a hypothesis that reaches it without EOS is finalised as it is (truncated), and its `log_prob` has no EOS term.
- Length penalty lp(Y) divides log P(Y) (`LENGTH_PENALTIES`): "gnmt" ((5+|Y|)/6)^alpha (Wu et al. 2016, the
  paper's), "fairseq" |Y|^alpha, "none" 1. |Y| counts the EOS of a finished hypothesis (as fairseq and OpenNMT-py
  count), at least 1.
- PAD and BOS are never generated; EOS is forbidden before `min_len` output tokens. Then the controls' mask
  (controls.py), once per step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from transformer.decoding.controls import Controls
from transformer.decoding.interface import CachingModel
from transformer.model.cache import init_cache

NEG_INF = float("-inf")


@dataclass
class Hypothesis:
    """One output sentence of the search."""

    tokens: list[int]  # output ids, without BOS and EOS
    score: float  # the search's score: log P / length penalty
    log_prob: float  # sum of token log-probabilities, including EOS when finished


LENGTH_PENALTIES: dict[str, Callable] = {  # decode.length_penalty -> lp(|Y|, alpha); names: DecodeConfig's Literal
    "gnmt": lambda length, alpha: ((5 + length) / 6) ** alpha,  # Wu et al. 2016, the paper's
    "fairseq": lambda length, alpha: length**alpha,
    "none": lambda length, alpha: 1.0,
}


def lp(length, *, alpha: float, kind: str):
    """lp(|Y|) for score = log P(Y) / lp: `kind` names a formula of LENGTH_PENALTIES (an int or a tensor length)."""
    if kind not in LENGTH_PENALTIES:
        raise ValueError(f"unknown length penalty {kind!r}: use one of {', '.join(LENGTH_PENALTIES)}")
    return LENGTH_PENALTIES[kind](length, alpha)


def start_cache(model, memory, src_mask: torch.Tensor, *, capacity: int):
    """The cache for a search's first step, one row per sentence: the model's own where it brings one (an
    ensemble's `init_cache`), else model/cache.py's `DecoderCache`."""
    if isinstance(model, CachingModel):
        return model.init_cache(memory, src_mask, beams=1, capacity=capacity)
    return init_cache(model, memory, src_mask, beams=1, capacity=capacity)


def max_output_lengths(model, src_mask: torch.Tensor, max_len_a: float, max_len_b: float) -> torch.Tensor:
    """src_mask (B, 1, 1, S) bool -> (B,) long: floor(a * S + b) per sentence, capped at max_positions - 1."""
    src_len = src_mask.flatten(1).sum(dim=1).double()  # (B,) real source lengths, EOS included
    limit = (src_len * max_len_a + max_len_b + 1e-6).floor().long()  # (B,)
    return limit.clamp(min=0, max=model.max_positions - 1)


def _forbid(log_probs: torch.Tensor, step: int, *, model, bos_id: int, eos_id: int, min_len: int) -> torch.Tensor:
    """(N, V) -> the same tensor, -inf at PAD and BOS, and at EOS while fewer than `min_len` tokens are out."""
    banned = (model.pad_id, bos_id) + ((eos_id,) if step < min_len else ())
    ban = ban_row(banned, log_probs.dtype, log_probs.device)  # (max id + 1,): -inf at the banned ids, else 0
    log_probs[:, : ban.numel()] += ban  # one small in-place add over the first columns (the special ids)
    return log_probs


def next_log_probs(model, tokens, cache, controls: Controls, step: int, bos_id: int, eos_id: int, min_len: int):
    """tokens (N, t+1) the rows so far -> (N, V): the model's next-token log-probabilities, PAD, BOS and early EOS
    forbidden (`_forbid`), then the controls' mask (controls.py), once per step."""
    log_probs = model.decode_step(tokens[:, -1:], cache)  # (N, V)
    log_probs = _forbid(log_probs, step, model=model, bos_id=bos_id, eos_id=eos_id, min_len=min_len)
    return controls.mask(log_probs, tokens, step)  # (N, V)


@functools.cache
def ban_row(banned: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(max id + 1,): -inf at the `banned` ids, 0 at the others; one tensor per ids, dtype and device (cached)."""
    row = torch.zeros(max(banned) + 1, dtype=dtype, device=device)
    row[list(banned)] = NEG_INF
    return row
