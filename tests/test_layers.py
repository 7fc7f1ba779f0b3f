"""layers.py: the residual wiring of section 3.1 (post-LN and pre-LN), the feed-forward network, the state-dict keys
and the decoder layer's cached step. Expected values are the paper's formulas written out with the layer's own
sub-modules, so a wrong order of dropout / add / norm, or a swapped sub-layer, shows."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import PAD, random_tokens

from transformer.model.attention import attention_bias, make_pad_mask
from transformer.model.cache import LayerCache
from transformer.model.layers import DecoderLayer, EncoderLayer, PositionwiseFeedForward

SIZES = dict(d_model=16, n_heads=2, d_ff=24, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, eps=1e-5)


def _layer(cls, norm_first: bool, activation: str = "relu"):
    torch.manual_seed(0)
    layer = cls(**SIZES, activation=activation, norm_first=norm_first).double().eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0, 0.3)  # LayerNorm weights and biases too, so a norm applied in the wrong place shows
    return layer


def test_state_dict_keys_are_the_api():
    """Checkpoints load by these names: the paper's sub-layers as the house style names them."""
    attention = ["qkv_proj.weight", "qkv_proj.bias", "out_proj.weight", "out_proj.bias"]
    cross = ["q_proj.weight", "q_proj.bias", "kv_proj.weight", "kv_proj.bias", "out_proj.weight", "out_proj.bias"]
    norm = ["weight", "bias"]
    ff = ["linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"]
    encoder = [f"self_attn.{k}" for k in attention] + [f"self_attn_norm.{k}" for k in norm]
    encoder += [f"ff.{k}" for k in ff] + [f"ff_norm.{k}" for k in norm]
    decoder = encoder[:6] + [f"cross_attn.{k}" for k in cross] + [f"cross_attn_norm.{k}" for k in norm] + encoder[6:]
    assert list(_layer(EncoderLayer, False).state_dict()) == encoder
    assert list(_layer(DecoderLayer, False).state_dict()) == decoder


SWISH = lambda x: x * torch.sigmoid(x)  # noqa: E731  silu, HF Marian's "swish", written out


@pytest.mark.parametrize("activation, fn", [("relu", F.relu), ("gelu", F.gelu), ("silu", SWISH)])
def test_feed_forward_is_two_linear_maps_around_the_activation(activation, fn):
    """FFN(x) = act(x W1 + b1) W2 + b2 (section 3.3), position by position."""
    torch.manual_seed(0)
    ff = PositionwiseFeedForward(d_model=16, d_ff=24, activation=activation, activation_dropout=0.0).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    expected = fn(x @ ff.linear1.weight.T + ff.linear1.bias) @ ff.linear2.weight.T + ff.linear2.bias
    torch.testing.assert_close(ff(x), expected)
    torch.testing.assert_close(ff(x[:, 2:3]), expected[:, 2:3])  # each position alone


def _padded_mask(length: int, row: int, real: int) -> torch.Tensor:
    """(2, 1, 1, S) bool for two source sentences of S = `length` tokens, of which `row` has only `real`."""
    src = random_tokens(2, length)
    src[row, real:] = PAD
    return make_pad_mask(src, PAD)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_wires_the_residuals(norm_first):
    """Post-LN: LN(x + Sublayer(x)) after each sub-layer; pre-LN: x + Sublayer(LN(x))."""
    layer, mask = _layer(EncoderLayer, norm_first), _padded_mask(6, row=1, real=4)
    x = torch.randn(2, 6, 16, dtype=torch.float64)

    def block(h, norm, sublayer):
        ln = lambda t: F.layer_norm(t, (16,), norm.weight, norm.bias, eps=1e-5)
        return h + sublayer(ln(h)) if norm_first else ln(h + sublayer(h))

    expected = block(x, layer.self_attn_norm, lambda h: layer.self_attn(h, mask=mask))
    expected = block(expected, layer.ff_norm, layer.ff)
    torch.testing.assert_close(layer(x, mask), expected)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_step_equals_its_full_forward(norm_first):
    """Position by position with the layer's cache equals the teacher-forced forward under the causal mask."""
    layer, mask = _layer(DecoderLayer, norm_first), _padded_mask(7, row=0, real=5)
    memory, x = torch.randn(2, 7, 16, dtype=torch.float64), torch.randn(2, 4, 16, dtype=torch.float64)  # S != T
    with torch.no_grad():
        full = layer(x, memory, mask)  # (B, T, D)
        cache = LayerCache(*layer.memory_kv(memory), slots=1, capacity=4)
        bias = attention_bias(mask, torch.float64)
        steps = torch.cat([layer.step(x[:, t : t + 1], cache, bias, None) for t in range(4)], dim=1)
    torch.testing.assert_close(steps, full)
    assert cache.keys.shape == (2, 2, 4, 8) and cache.cross_k.shape == (2, 2, 7, 8)


def test_decoder_layer_step_shares_memory_across_beams():
    """K = 3 rows per sentence query one copy of the sentence's memory and one cache with a slot per row (each row
    attending its own): equal to each row with its own copy."""
    layer, mask = _layer(DecoderLayer, False), _padded_mask(7, row=1, real=3)
    memory, x = torch.randn(2, 7, 16, dtype=torch.float64), torch.randn(6, 2, 16, dtype=torch.float64)
    rows = torch.arange(2).repeat_interleave(3)  # (6,) each row's sentence
    with torch.no_grad():
        full = layer(x, memory[rows], mask[rows])  # (6, 2, 16)
        cache = LayerCache(*layer.memory_kv(memory), slots=3, capacity=2)
        own = attention_bias(torch.eye(3, dtype=torch.bool), torch.float64)  # (K, slots): row k's history, slot k
        bias = attention_bias(mask, torch.float64)
        steps = [layer.step(x[:, t : t + 1], cache, bias, own.repeat(1, t + 1)) for t in range(2)]  # (K, (t+1)*K)
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    assert cache.cross_k.shape == (2, 2, 7, 8) and cache.keys.shape == (2, 2, 2 * 3, 8)  # (B, H, t * slots, Dh)
