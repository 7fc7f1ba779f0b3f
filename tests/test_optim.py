"""The optimizer update (optim.py): the paper's schedule, accumulation, non-finite skips, learning a copy task."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import EOS, PAD, tiny_model

from transformer.config import TrainConfig
from transformer.data.batching import Batch, collate
from transformer.data.prepare import EncodedSplit
from transformer.training import optim


def make_batch(sequences: list[list[int]], targets: list[list[int]]) -> Batch:
    """The real collate (batching.py): sources get EOS, tgt_in starts with BOS, tgt_out ends with EOS."""
    split = EncodedSplit.from_lists([s + [EOS] for s in sequences], targets)
    return collate(split, range(len(sequences)))


def random_task(n: int, seed: int, reverse: bool = False, batch_size: int = 8) -> list[Batch]:
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n):
        seqs = [
            torch.randint(4, 23, (int(torch.randint(3, 8, (1,), generator=g)),), generator=g).tolist()
            for _ in range(batch_size)
        ]
        batches.append(make_batch(seqs, [s[::-1] if reverse else s for s in seqs]))
    return batches


# 512^-0.5 * min(step^-0.5, step * 4000^-1.5), worked by hand: the peak at step 4000 is 512^-0.5 * 4000^-0.5
@pytest.mark.parametrize("step, expected", [(1, 1.747e-7), (4000, 6.988e-4), (8000, 4.941e-4), (100000, 1.398e-4)])
def test_noam_schedule_values(step, expected):
    assert optim.noam_lr(step, d_model=512, warmup_steps=4000) == pytest.approx(expected, rel=1e-3)


def test_inverse_sqrt_schedule():
    lr = lambda s: optim.inverse_sqrt_lr(s, peak_lr=1e-3, warmup_steps=100)
    assert lr(50) == pytest.approx(5e-4) and lr(100) == pytest.approx(1e-3) and lr(400) == pytest.approx(5e-4)


def _update(model, batches, train, precision="fp32"):
    optimizer = optim.make_optimizer(model, train)
    return optim.train_update(
        model, batches, optimizer, lr=1e-3, train=train, precision=precision, scaler=None, pad_id=PAD
    ), optimizer


def test_accumulation_equals_one_big_batch():
    """Two micro-batches give the same gradient (and update) as one batch holding both."""
    a, b = random_task(2, seed=3)
    together = make_batch(
        [s[s != PAD][:-1].tolist() for s in torch.cat([_pad_to(a.src, 9), _pad_to(b.src, 9)])],
        [t[t != PAD][:-1].tolist() for t in torch.cat([_pad_to(a.tgt_out, 9), _pad_to(b.tgt_out, 9)])],
    )
    train = TrainConfig(label_smoothing=0.1)
    m1, m2 = tiny_model(), tiny_model()
    s1, _ = _update(m1, [a, b], train)
    s2, _ = _update(m2, [together], train)
    assert s1.tokens == s2.tokens and s1.loss == pytest.approx(s2.loss, rel=1e-5)
    for (name, p1), p2 in zip(m1.named_parameters(), m2.parameters()):
        torch.testing.assert_close(p1, p2, atol=1e-6, rtol=1e-5, msg=name)


def _pad_to(x: torch.Tensor, length: int) -> torch.Tensor:
    return F.pad(x, (0, length - x.size(1)), value=PAD)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_learns_reverse_task(precision):
    """A tiny model learns to reverse short sequences to a low loss (bf16 autocast works on CPU too)."""
    torch.manual_seed(0)
    model = tiny_model(d_model=64, d_ff=128, n_heads=4, n_encoder_layers=2, n_decoder_layers=2).train()
    train = TrainConfig(label_smoothing=0.0, lr_schedule="inverse_sqrt", lr=2e-3, warmup_steps=50)
    optimizer = optim.make_optimizer(model, train)
    data = random_task(64, seed=1, reverse=True, batch_size=32)
    for step in range(1, 301):
        stats = optim.train_update(
            model,
            [data[step % 64]],
            optimizer,
            lr=optim.learning_rate(step, train, None),
            train=train,
            precision=precision,
            scaler=None,
            pad_id=PAD,
        )
    assert stats.nll < 0.15, stats


def test_non_finite_loss_skips_the_update():
    model = tiny_model()
    before = [p.clone() for p in model.parameters()]
    with torch.no_grad():
        model.output_proj.weight[5, 0] = float("nan")
    stats, _ = _update(model, random_task(1, seed=0), TrainConfig())
    assert stats.skipped and stats.loss != stats.loss
    for p, q in zip(list(model.parameters())[1:], before[1:]):
        torch.testing.assert_close(p, q)


def test_gradient_clipping():
    model = tiny_model()
    stats, _ = _update(model, random_task(1, seed=0), TrainConfig(clip_norm=1e-3))
    assert stats.grad_norm > 1e-3  # the norm is reported before clipping


def test_micro_batch_count():
    assert optim.micro_batch_count(25000, 3000, 1) == 8
    assert optim.micro_batch_count(25000, 3000, 8) == 1
    assert optim.micro_batch_count(100, 3000, 1) == 1


@pytest.mark.parametrize("clip_norm", [0.0, 1.0])
def test_non_finite_gradient_under_a_finite_loss_skips_the_update(clip_norm):
    """Without a GradScaler nothing else catches it: clipping would spread the NaN and Adam write it everywhere."""
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.encoder.layers[0].ff.linear1.weight.register_hook(lambda grad: grad * float("nan"))
    stats, optimizer = _update(model, random_task(1, seed=0), TrainConfig(clip_norm=clip_norm))
    assert math.isfinite(stats.loss) and not math.isfinite(stats.grad_norm)
    assert stats.skipped and stats.nonfinite
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert not optimizer.state  # Adam took no step (its moments would otherwise hold the NaN)


def test_update_size_warning():
    """8 GPUs each filling one ~7k-token micro-batch make ~56k-token updates, not 25k."""
    warning = optim.update_size_warning(25000, 8192, 7000, world_size=8, accumulation=1)
    assert warning and "about 56,000 target tokens" in warning and "2.2x train.update_tokens (25,000)" in warning
    assert "lower train.max_tokens to about 3,657" in warning  # 8192 * 25000 / 56000
    assert optim.update_size_warning(25000, 4096, 3000, world_size=1, accumulation=8) is None
    assert optim.update_size_warning(25000, 8192, 7000, world_size=4, accumulation=1) is None  # 28k: close


# --------------------------------------------------------------------- no host-device sync per update


def _fused_adam(model: torch.nn.Module, train: TrainConfig) -> torch.optim.Optimizer:
    """make_optimizer's CUDA optimizer (fused Adam), here on the CPU where torch has the fused kernel."""
    try:
        return torch.optim.Adam(model.parameters(), lr=0.0, betas=train.adam_betas, eps=train.adam_eps, fused=True)
    except (RuntimeError, TypeError) as exc:  # an older torch without the CPU kernel
        pytest.skip(f"no fused Adam on the CPU: {exc}")


class _NoHostReads:
    """Fails the test on any read of a tensor's value by the host (`.item()`, `float()`, `bool()`, `.tolist()`)."""

    def __enter__(self):
        self.saved = {name: getattr(torch.Tensor, name) for name in ("item", "__float__", "__bool__", "tolist")}
        for name in self.saved:
            setattr(torch.Tensor, name, lambda *args, name=name: pytest.fail(f"host read: Tensor.{name}"))

    def __exit__(self, *exc):
        for name, method in self.saved.items():
            setattr(torch.Tensor, name, method)


def test_device_skip_equals_the_synced_update_bitwise(monkeypatch):
    """Five updates, the third with a NaN gradient: deciding the skip on the device (fused Adam's found_inf) leaves
    the same parameters and Adam state, bit for bit, as the host-side decision (`_apply_update`, the update that reads
    its flags on the host), and the device path reads nothing on the host."""
    train = TrainConfig(label_smoothing=0.1, clip_norm=1.0)
    data = random_task(5, seed=4)

    def run(on_device: bool):
        model = tiny_model().train()
        optimizer = _fused_adam(model, train)
        poison = model.encoder.layers[0].ff.linear1.weight
        history = []
        for n, batch in enumerate(data, 1):
            hook = poison.register_hook(lambda grad: grad * float("nan")) if n == 3 else None
            with monkeypatch.context() as m:
                m.setattr(optim, "skips_on_device", lambda *args: on_device)
                guard = _NoHostReads() if on_device else contextlib.nullcontext()
                with guard:
                    stats = optim.train_update(
                        model, [batch], optimizer, lr=1e-3 * n, train=train, precision="fp32", scaler=None, pad_id=PAD
                    )
            if hook is not None:
                hook.remove()
            history.append((float(stats.loss), float(stats.grad_norm), bool(stats.skipped), bool(stats.nonfinite)))
        return model, optimizer, history

    device_model, device_opt, device_history = run(True)
    synced_model, synced_opt, synced_history = run(False)
    assert [h[2:] for h in device_history] == [(False, False)] * 2 + [(True, True)] + [(False, False)] * 2
    for (loss, norm, *_), (loss_ref, norm_ref, *_) in zip(device_history, synced_history):
        assert loss == loss_ref and (norm == norm_ref or math.isnan(norm) and math.isnan(norm_ref))
    for (name, p), q in zip(device_model.named_parameters(), synced_model.parameters()):
        assert torch.equal(p, q), name
    for p, q in zip(device_model.parameters(), synced_model.parameters()):
        a, b = device_opt.state[p], synced_opt.state[q]
        assert all(torch.equal(a[k], b[k]) for k in ("step", "exp_avg", "exp_avg_sq")) and float(a["step"]) == 4


def test_only_a_fused_adam_without_scaler_skips_on_the_device():
    model, train = tiny_model(), TrainConfig()
    assert not optim.skips_on_device(optim.make_optimizer(model, train), None)  # unfused on the CPU
    fused = _fused_adam(model, train)
    assert optim.skips_on_device(fused, None)
    assert not optim.skips_on_device(fused, torch.amp.GradScaler("cpu", enabled=False))
