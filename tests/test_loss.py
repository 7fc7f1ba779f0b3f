"""The label-smoothed loss against PyTorch's `cross_entropy(label_smoothing=...)`, the chunked loss against it, and
the pad-free training step (`optim.batch_loss`, `optim.train_update`) against the full one."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from transformer.config import ModelConfig, TrainConfig
from transformer.data.batching import Batch
from transformer.model.transformer import Transformer
from transformer.training.loss import chunked_label_smoothed_loss, label_smoothed_loss
from transformer.training.optim import batch_loss, train_update

PAD = 0


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_label_smoothed_loss_equals_pytorch(epsilon):
    logits = torch.randn(3, 5, 11)
    target = torch.randint(1, 11, (3, 5))
    target[0, 3:] = PAD
    loss, nll = label_smoothed_loss(logits, target, epsilon=epsilon, pad_id=PAD)
    flat = dict(input=logits.flatten(0, 1), target=target.flatten(), ignore_index=PAD, reduction="sum")
    torch.testing.assert_close(loss, F.cross_entropy(**flat, label_smoothing=epsilon))
    torch.testing.assert_close(nll, F.cross_entropy(**flat))


def test_label_smoothing_target_distribution():
    """The loss's minimiser is 1 - eps + eps/V on the reference and eps/V elsewhere."""
    V, eps = 5, 0.1
    best = torch.full((V,), eps / V)
    best[2] += 1 - eps
    logits = best.log().view(1, 1, V).requires_grad_()
    loss, _ = label_smoothed_loss(logits, torch.tensor([[2]]), epsilon=eps, pad_id=PAD)
    (grad,) = torch.autograd.grad(loss, logits)
    assert grad.abs().max() < 1e-6


def _reference(hidden, weight, target, epsilon):
    logits = hidden @ weight.T  # (N, V)
    return label_smoothed_loss(logits[None], target[None], epsilon=epsilon, pad_id=-1)  # no row is padding


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
@pytest.mark.parametrize("chunk_rows", [1, 4, 7, None])  # one row per chunk, uneven last chunk, a single chunk
def test_chunked_loss_equals_reference_in_value_and_gradient(epsilon, chunk_rows):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(13, 16, generator=g, dtype=torch.float64, requires_grad=True)  # N 13, D 16
    weight = torch.randn(23, 16, generator=g, dtype=torch.float64, requires_grad=True)  # V 23
    target = torch.randint(0, 23, (13,), generator=g)
    loss, nll = chunked_label_smoothed_loss(hidden, weight, target, epsilon=epsilon, chunk_rows=chunk_rows)
    (2.5 * loss).backward()  # a non-unit upstream gradient, as the trainer's 1 / tokens
    grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    ref_loss, ref_nll = _reference(hidden, weight, target, epsilon)
    (2.5 * ref_loss).backward()
    torch.testing.assert_close(loss, ref_loss)  # both float32
    torch.testing.assert_close(nll, ref_nll)
    torch.testing.assert_close(grads[0], hidden.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[1], weight.grad, rtol=1e-5, atol=1e-6)
    assert not nll.requires_grad


def test_chunked_loss_under_bf16_autocast_is_close_and_keeps_dtypes():
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(40, 16, generator=g, requires_grad=True)
    weight = torch.randn(23, 16, generator=g, requires_grad=True)
    target = torch.randint(0, 23, (40,), generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = chunked_label_smoothed_loss(hidden, weight, target, epsilon=0.1, chunk_rows=16)
    loss.backward()
    assert loss.dtype == torch.float32 and hidden.grad.dtype == weight.grad.dtype == torch.float32
    ref, _ = _reference(hidden.detach(), weight.detach(), target, 0.1)
    assert abs(loss.item() - ref.item()) / ref.item() < 2e-2  # bf16 logits: about 3 significant digits


def test_chunked_loss_without_gradients_and_with_no_rows():
    hidden, weight = torch.randn(5, 16, requires_grad=True), torch.randn(23, 16, requires_grad=True)
    target = torch.randint(0, 23, (5,))
    with torch.no_grad():
        loss, _ = chunked_label_smoothed_loss(hidden, weight, target, epsilon=0.1)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, _reference(hidden.detach(), weight.detach(), target, 0.1)[0])
    empty, _ = chunked_label_smoothed_loss(hidden[:0], weight, target[:0], epsilon=0.1)
    empty.backward()
    assert empty.item() == 0.0 and weight.grad.abs().sum() == 0


def _model(seed=0, **kwargs):
    torch.manual_seed(seed)
    config = ModelConfig(d_model=16, n_heads=2, d_ff=24, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0, **kwargs)
    return Transformer.from_config(config, src_vocab_size=23, tgt_vocab_size=23, pad_id=PAD)


def _padded_batch():
    """Rows of different lengths (S != T), padding on both sides."""
    src = torch.tensor([[5, 6, 7, 3, 0], [8, 9, 3, 0, 0], [4, 5, 6, 7, 3]])  # (3, 5)
    tgt_in = torch.tensor([[2, 11, 12, 0], [2, 13, 0, 0], [2, 14, 15, 16]])  # (3, 4)
    tgt_out = torch.tensor([[11, 12, 3, 0], [13, 3, 0, 0], [14, 15, 16, 3]])
    return Batch(src, tgt_in, tgt_out, indices=[0, 1, 2])


def test_batch_tgt_index_lists_the_non_pad_targets():
    batch = _padded_batch()
    assert batch.tgt_index.tolist() == [0, 1, 2, 4, 5, 8, 9, 10, 11] and batch.n_tgt_tokens == 9


@pytest.mark.parametrize("tie_output", [True, False])
def test_pad_free_projection_equals_the_full_logits_at_real_positions(tie_output):
    model, batch = _model(tie_output=tie_output).eval(), _padded_batch()
    full = model(batch.src, batch.tgt_in)  # (B, T, V)
    rows = model(batch.src, batch.tgt_in, positions=batch.tgt_index)  # (N, V)
    torch.testing.assert_close(rows, full.flatten(0, 1)[batch.tgt_out.flatten() != PAD])
    hidden = model(batch.src, batch.tgt_in, positions=batch.tgt_index, project=False)  # (N, D)
    assert hidden.shape == (9, 16)
    torch.testing.assert_close(model.output_proj(hidden), rows)


@pytest.mark.parametrize("tie_output", [True, False])
def test_fused_batch_loss_equals_the_reference_loss_and_gradients(tie_output):
    batch = _padded_batch()
    results = []
    for fused in (False, True):
        model = _model(tie_output=tie_output)
        loss, nll = batch_loss(model, batch, precision="fp32", epsilon=0.1, pad_id=PAD, fused=fused)
        loss.backward()
        results.append((loss, nll, {n: p.grad for n, p in model.named_parameters()}))
    (ref_loss, ref_nll, ref_grads), (loss, nll, grads) = results
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(nll, ref_nll)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_fused_update_equals_the_reference_update():
    """One update with the fused loss leaves the same parameters as with full logits (pads included). SGD, not
    Adam: Adam's first step is about lr * sign(gradient), which turns rounding noise in gradients that are zero in
    exact arithmetic (the key bias) into full-size steps."""
    models = {}
    for fused in (False, True):
        model = _model(seed=3)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
        train = TrainConfig(fused_loss=fused, label_smoothing=0.1)
        stats = train_update(
            model,
            [_padded_batch(), _padded_batch()],
            optimizer,
            lr=1e-2,
            train=train,
            precision="fp32",
            scaler=None,
            pad_id=PAD,
        )
        models[fused] = (copy.deepcopy(model.state_dict()), stats)
    (ref_state, ref_stats), (state, stats) = models[False], models[True]
    assert stats.tokens == ref_stats.tokens == 18
    assert abs(stats.loss - ref_stats.loss) < 1e-5 and abs(stats.grad_norm - ref_stats.grad_norm) < 1e-4
    for name in state:
        torch.testing.assert_close(state[name], ref_state[name], rtol=1e-4, atol=1e-6, msg=name)
