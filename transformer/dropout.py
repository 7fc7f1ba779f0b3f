"""Dropout (paper section 5.4: P_drop on each sub-layer's output and on the sums of embeddings and positions), with
masks that are cheap to draw on the CPU.

`F.dropout` on the CPU draws one number from PyTorch's generator per element, and that generator runs on one
thread: 6.5 ms for a (4096, 256) activation on the 2-core dev machine, 7% of a small model's training step
(docs/benchmarks.md). Here each element takes 16 random bits, four from each 64-bit draw: 1.2 ms. An element is
dropped when its 16 bits, read as a number u in [0, 2^16), fall below q = round(p * 2^16): the drop probability is
q / 2^16 (p = 0.1: 0.1000061), and kept elements are scaled by 2^16 / (2^16 - q), so the expectation is x exactly,
as with `F.dropout`. The masks are applied with arithmetic (no boolean tensors: PyTorch's CPU kernels on them are
several times slower).

On other devices, for other dtypes, or with `use_fast_dropout(False)` (`train.fast_cpu_dropout: false`, which
gives the random stream of earlier versions), it is `F.dropout`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_enabled = True
_LEVELS = 1 << 16  # a mask element's 16 bits


def use_fast_dropout(enabled: bool) -> None:
    """Turn the CPU masks on or off for this process (the trainer sets it from `train.fast_cpu_dropout`)."""
    global _enabled
    _enabled = enabled


def keep_scale(bits: torch.Tensor, p: float) -> torch.Tensor:
    """int16 random bits -> float32 mask of the same shape: 0 where dropped, 2^16 / (2^16 - q) where kept."""
    q = round(p * _LEVELS)
    # with u = bits + 2^15 in [0, 2^16), an integer: u >= q <=> u - q + 1 >= 1 and u < q <=> u - q + 1 <= 0, so
    # clamping u - q + 1 to [0, 1] gives the mask
    return bits.to(torch.float32).add_(_LEVELS // 2 - q + 1).clamp_(0, 1).mul_(_LEVELS / (_LEVELS - q))


def cpu_dropout(x: torch.Tensor, p: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """x * mask, the mask drawn as the module docstring says (float32 CPU tensors)."""
    n = x.numel()
    draws = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device)
    bits = draws.random_(-(1 << 63), None, generator=generator).view(torch.int16)[:n].view(x.shape)
    return x * keep_scale(bits, p)


class Dropout(nn.Module):
    """`nn.Dropout` with the CPU masks of this module (no parameters: state dicts are unchanged)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if _enabled and x.device.type == "cpu" and x.dtype == torch.float32 and self.p < 1.0:
            return cpu_dropout(x, self.p)
        return F.dropout(x, self.p, training=True)

    def extra_repr(self) -> str:
        return f"p={self.p}"
