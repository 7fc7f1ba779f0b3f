"""dropout.py: the CPU masks drop with probability round(p * 2^16) / 2^16, keep the expectation, reproduce under a
seed, differentiate as a mask; elsewhere and when turned off it is F.dropout itself."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer.dropout import Dropout, cpu_dropout, keep_scale, use_fast_dropout


@pytest.fixture
def torch_masks():
    use_fast_dropout(False)
    yield
    use_fast_dropout(True)


def test_keep_scale_over_every_16_bit_value():
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)  # all 65536 values once
    for p in (0.1, 0.3, 0.5):
        q = round(p * 65536)  # p = 0.1: q = 6554
        mask = keep_scale(bits, p)
        dropped = mask == 0
        assert int(dropped.sum()) == q  # drop probability exactly q / 2^16
        assert dropped[:q].all() and not dropped[q:].any()  # the q smallest values of u = bits + 2^15
        assert torch.all(mask[q:] == 65536 / (65536 - q))
        assert float(mask.double().mean()) == pytest.approx(1.0, abs=1e-6)  # E[mask] = 1: the expectation is x


def test_cpu_dropout_rate_values_and_each_16_bit_lane():
    x = torch.rand(1000, 1000) + 0.5
    g = torch.Generator().manual_seed(0)
    y = cpu_dropout(x, 0.1, generator=g)
    dropped = y == 0
    # 10^6 Bernoulli(0.1): standard deviation 3e-4, so 0.1 +- 0.0015 fails with probability ~1e-6
    assert abs(float(dropped.float().mean()) - 0.1) < 0.0015
    for lane in range(4):  # the four 16-bit pieces of each 64-bit draw all drop at the same rate
        assert abs(float(dropped.flatten()[lane::4].float().mean()) - 0.1) < 0.003
    kept = ~dropped
    assert torch.allclose(y[kept], x[kept] * (65536 / (65536 - 6554)), rtol=0, atol=1e-6)


def test_cpu_dropout_reproduces_under_a_seed_and_its_gradient_is_the_mask():
    x = torch.randn(3, 7, 5, requires_grad=True)
    torch.manual_seed(3)
    y = Dropout(0.3).train()(x)
    torch.manual_seed(3)
    assert torch.equal(Dropout(0.3).train()(x), y)  # the global generator, as the trainer seeds and resumes it
    y.backward(torch.ones_like(y))
    mask = keep_scale(torch.zeros(1, dtype=torch.int16) + 2**15 - 1, 0.3)  # any kept element's factor
    expected = torch.where(y == 0, torch.zeros(()), mask)
    assert torch.equal(x.grad, expected)


def test_odd_sizes_and_identity_when_not_training():
    x = torch.randn(5, 3)  # 15 elements: 4 draws, one 16-bit piece unused
    assert cpu_dropout(x, 0.2).shape == (5, 3)
    layer = Dropout(0.2)
    assert layer.eval()(x) is x
    assert Dropout(0.0).train()(x) is x
    assert "p=0.2" in repr(layer)


def test_turned_off_or_other_dtypes_it_is_f_dropout(torch_masks):
    x = torch.randn(64, 64)
    torch.manual_seed(5)
    ours = Dropout(0.1).train()(x)
    torch.manual_seed(5)
    assert torch.equal(ours, F.dropout(x, 0.1, training=True))
    use_fast_dropout(True)
    half = x.to(torch.bfloat16)
    torch.manual_seed(5)
    ours = Dropout(0.1).train()(half)
    torch.manual_seed(5)
    assert torch.equal(ours, F.dropout(half, 0.1, training=True))
