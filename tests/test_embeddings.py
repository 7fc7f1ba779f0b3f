"""Embeddings and positional encodings: the sinusoid table (section 3.5), the sqrt(d_model) scale (section 3.4)."""

from __future__ import annotations

import math

import pytest
import torch

from transformer.model.embeddings import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    sinusoid_table,
)

# Section 3.5 worked by hand for d_model = 8: PE(pos, 2i) = sin(pos / 10000^(2i/8)), PE(pos, 2i+1) = cos(same), so the
# angles of row pos are pos * (1, 0.1, 0.01, 0.001); e.g. row 1 = sin 1, cos 1, sin 0.1, cos 0.1, ... (4 decimals).
EXPECTED_PE = {
    0: [0, 1, 0, 1, 0, 1, 0, 1],
    1: [0.8415, 0.5403, 0.0998, 0.9950, 0.0100, 1.0000, 0.0010, 1.0000],
    2: [0.9093, -0.4161, 0.1987, 0.9801, 0.0200, 0.9998, 0.0020, 1.0000],
    3: [0.1411, -0.9900, 0.2955, 0.9553, 0.0300, 0.9996, 0.0030, 1.0000],
    5: [-0.9589, 0.2837, 0.4794, 0.8776, 0.0500, 0.9988, 0.0050, 1.0000],
    6: [-0.2794, 0.9602, 0.5646, 0.8253, 0.0600, 0.9982, 0.0060, 1.0000],
}


@pytest.mark.parametrize("position", sorted(EXPECTED_PE))
def test_sinusoid_table_matches_seed_vectors(position):
    table = sinusoid_table(7, 8)
    torch.testing.assert_close(
        table[position], torch.tensor(EXPECTED_PE[position], dtype=torch.float32), atol=1e-4, rtol=0
    )


def test_seed_example_o_d4():
    """The corrected d = 4 rows (the seed wrongly used 10000^0 for dimensions 2-3)."""
    torch.testing.assert_close(
        sinusoid_table(4, 4)[1], torch.tensor([0.8415, 0.5403, 0.0100, 0.99995]), atol=1e-4, rtol=0
    )


@pytest.mark.parametrize("cls", [SinusoidalPositionalEncoding, LearnedPositionalEmbedding])
def test_positions_with_offset_equal_the_full_sequence(cls):
    torch.manual_seed(0)
    pe = cls(d_model=6, max_positions=20)
    x = torch.randn(2, 9, 6)
    full = pe(x)
    torch.testing.assert_close(pe(x[:, 4:5], offset=4), full[:, 4:5])


def test_token_embedding_scale_and_pad_row():
    emb = TokenEmbedding(vocab_size=50, d_model=64, pad_id=0)
    out = emb(torch.tensor([[0, 5]]))
    assert out[0, 0].abs().sum() == 0
    torch.testing.assert_close(out[0, 1], emb.weight[5] * math.sqrt(64))
    unscaled = TokenEmbedding(vocab_size=50, d_model=64, pad_id=0, scale=False)  # model.scale_embedding: false
    torch.testing.assert_close(unscaled(torch.tensor([[5]]))[0, 0], unscaled.weight[5])
