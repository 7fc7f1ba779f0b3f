"""Token embeddings and positional encodings (paper sections 3.4 and 3.5).

Legend: B batch, T sequence length, D d_model, V vocabulary.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class TokenEmbedding(nn.Module):
    """Embedding lookup multiplied by sqrt(d_model) (section 3.4), initialised N(0, d_model^-0.5).

    scale=False leaves out the sqrt(d_model) (an imported model trained without it; the paper has it).

    With that initialisation the scaled embeddings have unit variance, the same scale as the positional
    encodings they are added to, and the unscaled matrix is a sensible pre-softmax projection when tied.
    """

    def __init__(self, *, vocab_size: int, d_model: int, pad_id: int, scale: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        self.pad_id = pad_id
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, mean=0.0, std=self.weight.size(1) ** -0.5)
        with torch.no_grad():
            self.weight[self.pad_id].zero_()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T) ids -> (B, T, D)."""
        return nn.functional.embedding(tokens, self.weight) * self.scale


def sinusoid_table(length: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)): (length, D)."""
    position = torch.arange(length, dtype=torch.float64)[:, None]  # (L, 1)
    inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (D/2,)
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
    return table.float()


def position_rows(table: torch.Tensor, offset: int | torch.Tensor, length: int) -> torch.Tensor:
    """Rows offset .. offset + length - 1 of a (positions, D) table. offset: an int, or a () long tensor on the
    table's device (a decoding step captured as a CUDA graph reads its position there, not from the host)."""
    if isinstance(offset, torch.Tensor):
        return table.index_select(0, offset + torch.arange(length, device=table.device))  # (length, D)
    return table[offset : offset + length]  # (length, D)


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sinusoids added to the embeddings (section 3.5); no parameters, so no state-dict entry."""

    def __init__(self, *, d_model: int, max_positions: int) -> None:
        super().__init__()
        self.register_buffer("table", sinusoid_table(max_positions, d_model), persistent=False)

    def forward(self, x: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:
        """x (B, T, D) -> x + PE[offset : offset + T] (`position_rows`)."""
        return x + position_rows(self.table, offset, x.size(1)).to(x.dtype)


class LearnedPositionalEmbedding(nn.Module):
    """Learned position vectors, the alternative the paper found to work equally well (Table 3, row E)."""

    def __init__(self, *, d_model: int, max_positions: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_positions, d_model))
        nn.init.normal_(self.weight, mean=0.0, std=d_model**-0.5)

    def forward(self, x: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:
        """x (B, T, D) -> x + P[offset : offset + T] (`position_rows`)."""
        return x + position_rows(self.weight, offset, x.size(1)).to(x.dtype)
