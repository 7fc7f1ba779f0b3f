"""The CPU's oneDNN Linear layers against nn.Linear (MKL): training's route equals it in value and gradient and stays
off where it does not apply; the packed decoding copy computes F.linear, decodes the same tokens, keeps the model."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import BOS, EOS, PAD, random_tokens, tiny_model
from torch import nn

from transformer import cpu_linear
from transformer.attention import make_pad_mask
from transformer.batching import Batch
from transformer.cpu_linear import PackedLinear, pack_linears
from transformer.decoding import beam_search, greedy_decode
from transformer.optim import batch_loss

needs_packing = pytest.mark.skipif(not cpu_linear.available(), reason="this PyTorch build has no oneDNN ops")


@pytest.fixture(autouse=True)
def _restore_switch():
    yield
    cpu_linear.use_onednn(True)


def _grads(module: nn.Linear, x: torch.Tensor, enabled: bool) -> tuple[torch.Tensor, ...]:
    """y = linear(module, x) and the gradients of sum(y * r) for x, weight and bias (when present)."""
    cpu_linear.use_onednn(enabled)
    x = x.clone().requires_grad_()
    y = cpu_linear.linear(module, x)
    r = torch.linspace(-1.0, 1.0, y.numel()).view(y.shape)
    params = [p for p in (module.weight, module.bias) if p is not None]
    grads = torch.autograd.grad((y * r).sum(), [x, *params])
    return (y.detach(), *grads)


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 5)])  # rows, as (N,), (B, T) or more leading axes
@pytest.mark.parametrize("bias", [True, False])
@needs_packing
def test_linear_equals_mkl_in_value_and_gradient(shape, bias):
    torch.manual_seed(0)
    module = nn.Linear(16, 24, bias=bias)
    x = torch.randn(*shape, 16)
    ours, reference = _grads(module, x, enabled=True), _grads(module, x, enabled=False)
    assert ours[0].shape == (*shape, 24)
    for a, b in zip(ours, reference):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@needs_packing
def test_linear_uses_onednn_only_while_training_in_float32(monkeypatch):
    calls = []
    apply = cpu_linear._Linear.apply
    monkeypatch.setattr(cpu_linear._Linear, "apply", lambda *a: calls.append(1) or apply(*a))
    module = nn.Linear(16, 24)
    x = torch.randn(3, 16)
    cpu_linear.linear(module, x)
    assert len(calls) == 1  # grad mode, float32, CPU: oneDNN
    with torch.no_grad():
        assert torch.equal(cpu_linear.linear(module, x), module(x))  # inference: module(x) itself
    cpu_linear.linear(module.double(), x.double())  # another dtype
    cpu_linear.use_onednn(False)
    cpu_linear.linear(module.float(), x)  # switched off
    assert len(calls) == 1


@needs_packing
def test_a_quantized_copy_keeps_its_own_forward():
    """int8 `quantize_dynamic` replaces nn.Linear by another type: linear() must call it, never read its weight."""
    quantized = cpu_linear.quantize_int8(nn.Sequential(nn.Linear(16, 24)))[0]
    x = torch.randn(3, 16, requires_grad=True)
    torch.testing.assert_close(cpu_linear.linear(quantized, x), quantized(x))


@needs_packing
def test_matmul_t_equals_a_times_b_transposed():
    a, b = torch.randn(5, 16), torch.randn(23, 16)
    torch.testing.assert_close(cpu_linear.matmul_t(a, b), a @ b.T, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cpu_linear.matmul_t(a, b.T.contiguous().T), a @ b.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fused", [True, False])
@needs_packing
def test_training_step_equals_mkl(fused):
    """The whole model: the batch loss and every parameter's gradient (tiny model, both loss paths)."""
    src, tgt = random_tokens(3, 7, seed=1), random_tokens(3, 6, seed=2)
    src[0, 5:] = PAD
    tgt[1, 4:] = PAD
    batch = Batch(src, tgt[:, :-1], tgt[:, 1:], indices=[0, 1, 2])
    results = []
    for enabled in (True, False):
        cpu_linear.use_onednn(enabled)
        model = tiny_model(dropout=0.0).train()
        loss, nll = batch_loss(model, batch, precision="fp32", epsilon=0.1, pad_id=PAD, fused=fused)
        loss.backward()
        results.append((loss.detach(), nll, {n: p.grad for n, p in model.named_parameters()}))
    (loss, nll, grads), (ref_loss, ref_nll, ref_grads) = results
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(nll, ref_nll)
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


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
