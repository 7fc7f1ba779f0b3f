"""The limit on runs of a repeated n-gram (`decode.max_ngram_repeats`), in a file of its own that imports only torch:
the search's `RepeatRunLimit` (controls.py) calls `repeat_run_ban`, and `transformer-export --format hf` copies this
file into its folder, where `RepeatRunLogitsProcessor` applies the same limit in Hugging Face `generate`.

Legend: N rows (sentences x beams), t tokens decoded so far, V vocabulary.

A token is forbidden when it would make the last `limit + 1` n-grams of a row's output pieces equal, for any n
("A A A", "ab ab ab" at limit 2): the loop that a model falls into on input unlike its training data is cut where it
starts. All n at once: the history read backwards, g, has period n over its first (limit + 1) * n - 1 pieces
exactly when the next piece g[n - 1] would complete the run.

    import sys; sys.path.insert(0, "export/hf")     # the exported folder, which holds this file
    from repeat_runs import RepeatRunLogitsProcessor
    model.generate(**inputs, logits_processor=LogitsProcessorList([RepeatRunLogitsProcessor(2)]))
"""

from __future__ import annotations

import torch


def repeat_run_ban(log_probs: torch.Tensor, history: torch.Tensor, limit: int) -> torch.Tensor:
    """log_probs (N, V) float, history (N, t) long: the output pieces so far (no start token). -> log_probs, -inf
    in place at each row's pieces that would make some n-gram occur `limit + 1` times in a row; limit >= 1."""
    recent = history.flip(1)  # (N, t), the last piece first
    t, r = recent.size(1), limit + 1  # r: equal n-grams in a row that make a loop
    lags = (t + 1) // r  # L: the longest n whose run the next piece could complete
    if lags == 0:
        return log_probs
    n = torch.arange(1, lags + 1, device=recent.device)[:, None]  # (L, 1)
    k = torch.arange((r - 1) * lags - 1, device=recent.device)[None, :]  # (1, K): places compared
    needed = k < (r - 1) * n - 1  # (L, K): for lag n, the first (r-1)*n - 1 places
    same = recent[:, (k + n).clamp(max=t - 1)] == recent[:, k[0]][:, None, :]  # (N, L, K)
    rows, lag = (same | ~needed).all(dim=2).nonzero(as_tuple=True)  # a row and lag n - 1 of each run
    log_probs[rows, recent[rows, lag]] = float("-inf")
    return log_probs


class RepeatRunLogitsProcessor:
    """`decode.max_ngram_repeats` as a Hugging Face logits processor: `__call__(input_ids, scores) -> scores`, as
    `generate` calls it once per step (after its log-softmax in beam search, on the logits in greedy search).
    input_ids (N, 1 + t): the decoder start token, then the pieces so far; scores (N, V)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"max_ngram_repeats must be >= 1, got {limit}")
        self.limit = limit

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return repeat_run_ban(scores.clone(), input_ids[:, 1:], self.limit)
