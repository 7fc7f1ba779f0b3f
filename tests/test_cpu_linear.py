"""The decoding copies for the CPU: the packed copy computes F.linear, decodes the same tokens and keeps the model;
the int8 copy replaces every Linear layer and leaves the model alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import BOS, EOS, PAD, random_tokens, tiny_model
from torch import nn

from transformer.decoding import cpu_linear
from transformer.decoding.cpu_linear import PackedLinear, pack_linears
from transformer.decoding.search import beam_search, greedy_decode
from transformer.model.attention import make_pad_mask

needs_packing = pytest.mark.skipif(not cpu_linear.available(), reason="this PyTorch build has no oneDNN ops")


@needs_packing
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7, 16), (3, 1, 16), (2, 5, 16), (0, 16)])
def test_packed_linear_computes_x_wt_plus_b(bias, shape):
    linear = nn.Linear(16, 23, bias=bias)
    x = torch.randn(*shape)
    with torch.no_grad():
        torch.testing.assert_close(PackedLinear(linear.weight, linear.bias)(x), F.linear(x, linear.weight, linear.bias))


@needs_packing
def test_pack_linears_leaves_the_model_and_shares_its_parameters():
    model = tiny_model().eval()
    packed = pack_linears(model)
    assert not any(type(m) is nn.Linear for m in packed.modules())
    assert sum(type(m) is PackedLinear for m in packed.modules()) == sum(type(m) is nn.Linear for m in model.modules())
    assert all(type(m) is not PackedLinear for m in model.modules())  # the given model is untouched
    assert packed.decoder.embedding.weight is model.decoder.embedding.weight  # shared, not copied
    assert packed.decoder.layers[0].ff_norm.weight is model.decoder.layers[0].ff_norm.weight
    assert packed.max_positions == model.max_positions and packed.pad_id == model.pad_id


@needs_packing
def test_packed_model_decodes_the_same_tokens():
    """Greedy and beam 4 on 40 sources: identical tokens, scores equal to float32 rounding."""
    model = tiny_model().eval()
    src = random_tokens(40, 9, seed=3)
    src[::3, 6:] = PAD
    mask = make_pad_mask(src, PAD)
    lengths = dict(bos_id=BOS, eos_id=EOS, max_len_a=1.0, max_len_b=5, min_len=0)
    beam = dict(beam_size=4, alpha=0.6, length_penalty="gnmt", nbest=4)
    packed = pack_linears(model)
    flat = lambda hyps: [h for row in hyps for h in (row if isinstance(row, list) else [row])]  # noqa: E731
    for search, settings in ((greedy_decode, {}), (beam_search, beam)):
        expected = flat(search(model, src, mask, **lengths, **settings))
        got = flat(search(packed, src, mask, **lengths, **settings))
        assert [h.tokens for h in got] == [h.tokens for h in expected]
        for a, b in zip(got, expected):
            assert a.score == pytest.approx(b.score, abs=1e-4)


def test_the_probe_leaves_the_random_stream_alone():
    cpu_linear.available.cache_clear()
    state = torch.get_rng_state()
    cpu_linear.available()
    assert torch.equal(torch.get_rng_state(), state)  # else a first validation would change training's dropout


def test_without_onednn_the_model_is_kept(monkeypatch):
    monkeypatch.setattr(cpu_linear, "available", lambda: False)
    model = tiny_model()
    assert pack_linears(model) is model


def test_int8_copy_quantizes_every_linear_layer_and_keeps_the_model():
    model = tiny_model().eval()
    quantized = cpu_linear.quantize_int8(model)
    assert not any(type(m) is nn.Linear for m in quantized.modules())
    assert all(type(m) is not nn.Linear or m.weight.dtype == torch.float32 for m in model.modules())
    assert any(type(m) is nn.Linear for m in model.modules())  # the given model is untouched


def _resident_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@needs_packing
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's /proc/self/status")
def test_few_row_counts_reach_onednn_so_its_kernels_stay_few():
    """oneDNN builds and keeps a kernel of about 0.5 MB for every row count it is called with: 1 to 300 rows, called
    unpadded, added 169 MB here; padded (`padded_rows`) they are 29 row counts (1..8, 10, 12, ..., 320): about 15 MB."""
    weight, bias = torch.randn(48, 32), torch.randn(48)
    linear = PackedLinear(weight, bias)
    linear(torch.randn(3, 32))  # oneDNN's own start-up is not what is measured
    before = _resident_kb()
    for n in range(1, 301):
        x = torch.randn(n, 32)
        torch.testing.assert_close(linear(x), F.linear(x, weight, bias))
    assert _resident_kb() - before < 40_000
