"""The oneDNN route for CPU training matmuls equals MKL's (`module(x)`, `a @ b.T`) in value and gradient, and stays
off wherever it does not apply (inference, other dtypes, other module types, switched off)."""

from __future__ import annotations

import pytest
import torch
from conftest import PAD, random_tokens, tiny_model
from torch import nn

from transformer import onednn
from transformer.batching import Batch
from transformer.optim import batch_loss

pytestmark = pytest.mark.skipif(not onednn.available(), reason="this torch has no oneDNN linear operator")


@pytest.fixture(autouse=True)
def _restore_switch():
    yield
    onednn.use_onednn(True)


def _grads(module: nn.Linear, x: torch.Tensor, enabled: bool) -> tuple[torch.Tensor, ...]:
    """y = linear(module, x) and the gradients of sum(y * r) for x, weight and bias (when present)."""
    onednn.use_onednn(enabled)
    x = x.clone().requires_grad_()
    y = onednn.linear(module, x)
    r = torch.linspace(-1.0, 1.0, y.numel()).view(y.shape)
    params = [p for p in (module.weight, module.bias) if p is not None]
    grads = torch.autograd.grad((y * r).sum(), [x, *params])
    return (y.detach(), *grads)


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 5)])  # rows, as (N,), (B, T) or more leading axes
@pytest.mark.parametrize("bias", [True, False])
def test_linear_equals_mkl_in_value_and_gradient(shape, bias):
    torch.manual_seed(0)
    module = nn.Linear(16, 24, bias=bias)
    x = torch.randn(*shape, 16)
    ours, reference = _grads(module, x, enabled=True), _grads(module, x, enabled=False)
    assert ours[0].shape == (*shape, 24)
    for a, b in zip(ours, reference):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_linear_uses_onednn_only_while_training_in_float32(monkeypatch):
    calls = []
    apply = onednn._Linear.apply
    monkeypatch.setattr(onednn._Linear, "apply", lambda *a: calls.append(1) or apply(*a))
    module = nn.Linear(16, 24)
    x = torch.randn(3, 16)
    onednn.linear(module, x)
    assert len(calls) == 1  # grad mode, float32, CPU: oneDNN
    with torch.no_grad():
        assert torch.equal(onednn.linear(module, x), module(x))  # inference: module(x) itself
    onednn.linear(module.double(), x.double())  # another dtype
    onednn.use_onednn(False)
    onednn.linear(module.float(), x)  # switched off
    assert len(calls) == 1


def test_a_quantized_copy_keeps_its_own_forward():
    """int8 `quantize_dynamic` replaces nn.Linear by another type: linear() must call it, never read its weight."""
    quantized = torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(16, 24)), {nn.Linear})[0]
    x = torch.randn(3, 16, requires_grad=True)
    torch.testing.assert_close(onednn.linear(quantized, x), quantized(x))


def test_matmul_t_equals_a_times_b_transposed():
    a, b = torch.randn(5, 16), torch.randn(23, 16)
    torch.testing.assert_close(onednn.matmul_t(a, b), a @ b.T, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(onednn.matmul_t(a, b.T.contiguous().T), a @ b.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fused", [True, False])
def test_training_step_equals_mkl(fused):
    """The whole model: the batch loss and every parameter's gradient (tiny model, both loss paths)."""
    src, tgt = random_tokens(3, 7, seed=1), random_tokens(3, 6, seed=2)
    src[0, 5:] = PAD
    tgt[1, 4:] = PAD
    batch = Batch(src, tgt[:, :-1], tgt[:, 1:], indices=[0, 1, 2])
    results = []
    for enabled in (True, False):
        onednn.use_onednn(enabled)
        model = tiny_model(dropout=0.0).train()
        loss, nll = batch_loss(model, batch, precision="fp32", epsilon=0.1, pad_id=PAD, fused=fused)
        loss.backward()
        results.append((loss.detach(), nll, {n: p.grad for n, p in model.named_parameters()}))
    (loss, nll, grads), (ref_loss, ref_nll, ref_grads) = results
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(nll, ref_nll)
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)
