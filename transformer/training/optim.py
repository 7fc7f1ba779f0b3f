"""The paper's section 5.3, Optimizer: Adam, the learning-rate schedule, and one optimizer update accumulated over
micro-batches and devices (its forward pass, the label-smoothed loss of `transformer.training.loss`, included).

Legend: B batch, T target length, N non-pad target positions, D d_model, V vocabulary.

Named as `torch.optim` is, for what it holds: what one optimizer step needs (its learning rate, its optimizer, how
many micro-batches make it, and the step itself, with mixed precision and the skip of a non-finite update). The
driver that wires data, checkpoints and validation around these pieces is `transformer.training.trainer`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from transformer.config import ModelConfig, TrainConfig
from transformer.precision import autocast
from transformer.training.loss import chunked_label_smoothed_loss, label_smoothed_loss


def noam_lr(step: int, *, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """The paper's schedule (section 5.3): scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).

    Linear warmup for `warmup_steps` updates, then decay with the inverse square root of the step.
    """
    step = max(step, 1)
    warmup = max(warmup_steps, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def inverse_sqrt_lr(step: int, *, peak_lr: float, warmup_steps: int) -> float:
    """fairseq's inverse_sqrt: linear warmup to `peak_lr`, then peak_lr * sqrt(warmup / step)."""
    step = max(step, 1)
    if step < warmup_steps:
        return peak_lr * step / warmup_steps
    return peak_lr * math.sqrt(max(warmup_steps, 1) / step)


def learning_rate(step: int, train: TrainConfig, model: ModelConfig) -> float:
    """The learning rate for update number `step` (1-based) under the configured schedule."""
    if train.lr_schedule == "noam":
        return noam_lr(step, d_model=model.d_model, warmup_steps=train.warmup_steps, scale=train.lr_scale)
    return inverse_sqrt_lr(step, peak_lr=train.lr, warmup_steps=train.warmup_steps)


def _unwrap(model: nn.Module) -> nn.Module:
    """The Transformer inside DDP and torch.compile wrappers."""
    while isinstance(getattr(model, "module", None) or getattr(model, "_orig_mod", None), nn.Module):
        model = getattr(model, "module", None) or model._orig_mod
    return model


def batch_loss(model: nn.Module, batch, *, precision: str, epsilon: float, pad_id: int, fused: bool = True):
    """Summed label-smoothed loss and NLL of one batch (the forward pass of a training step), float32 scalars.

    batch: src (B, S), tgt_in and tgt_out (B, T) on the model's device, and (optionally) tgt_index (N,), the flat
    positions of the non-pad targets (`batching.Batch`). fused: the decoder states of those N positions only, through
    `loss.chunked_label_smoothed_loss` (no (B*T, V) logits or float32 log-probabilities, no work on padding);
    else the full logits through `label_smoothed_loss`. Both give the same value and gradient (tested).
    """
    device = batch.src.device
    fused = fused and _unwrap(model).output_proj.bias is None  # the chunked loss has no output bias
    with autocast(precision, device):
        if not fused:
            logits = model(batch.src, batch.tgt_in)  # (B, T, V)
            return label_smoothed_loss(logits, batch.tgt_out, epsilon=epsilon, pad_id=pad_id)
        index = getattr(batch, "tgt_index", None)  # made on the host by collate; else found here (a device sync)
        index = batch.tgt_out.flatten().ne(pad_id).nonzero().squeeze(1) if index is None else index  # (N,)
        hidden = model(batch.src, batch.tgt_in, positions=index, project=False)  # (N, D)
        target = batch.tgt_out.flatten().index_select(0, index)  # (N,)
        weight = _unwrap(model).output_proj.weight  # (V, D)
        return chunked_label_smoothed_loss(hidden, weight, target, epsilon=epsilon)


def make_optimizer(model: nn.Module, train: TrainConfig) -> torch.optim.Optimizer:
    """Adam(beta1, beta2, eps) as the paper (0.9, 0.98, 1e-9); AdamW when weight decay is set."""
    kwargs = dict(lr=0.0, betas=train.adam_betas, eps=train.adam_eps)
    fused = {"fused": True} if next(model.parameters()).is_cuda else {}
    if train.weight_decay > 0:
        return torch.optim.AdamW(model.parameters(), weight_decay=train.weight_decay, **kwargs, **fused)
    return torch.optim.Adam(model.parameters(), **kwargs, **fused)


@dataclass
class UpdateStats:
    """What one update did. On the synced path plain floats and bools; where the skip is decided on the device
    (`skips_on_device`), () tensors on the device that nothing reads until the trainer logs (`on_device`)."""

    loss: float | torch.Tensor  # label-smoothed loss per target token
    nll: float | torch.Tensor  # negative log-likelihood per target token (log of the perplexity)
    tokens: int  # target tokens in the update, over all micro-batches and devices
    grad_norm: float | torch.Tensor  # global gradient norm before clipping (nan when the step was skipped)
    skipped: bool | torch.Tensor  # fp16 overflow, or a non-finite loss or gradient: no parameter change
    nonfinite: bool | torch.Tensor = False  # a non-finite loss, or a non-finite gradient without a GradScaler

    @property
    def on_device(self) -> bool:
        return isinstance(self.skipped, torch.Tensor)


def skips_on_device(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None) -> bool:
    """True when the update can skip a non-finite step without the host reading anything: a fused Adam/AdamW
    (`make_optimizer` on CUDA) takes `found_inf` and then leaves weights, moments and step count as they were.
    Otherwise (a GradScaler, whose bookkeeping reads the scale; an unfused optimizer) the host decides."""
    fused = isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)) and optimizer.defaults.get("fused")
    return scaler is None and bool(fused)


def _sync_context(model: nn.Module, last: bool) -> contextlib.AbstractContextManager:
    """DDP all-reduces gradients on the last micro-batch only."""
    if last or not hasattr(model, "no_sync"):
        return contextlib.nullcontext()
    return model.no_sync()


def _all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.all_reduce(tensor)
    return tensor.tolist()


def train_update(
    model: nn.Module,
    micro_batches: Sequence,
    optimizer: torch.optim.Optimizer,
    *,
    lr: float,
    train: TrainConfig,
    precision: str,
    scaler: torch.amp.GradScaler | None,
    pad_id: int,
) -> UpdateStats:
    """One optimizer update from several micro-batches (and, under DDP, several devices).

    The loss is normalised by the number of target tokens in the whole update, counted over every micro-batch and
    device before the first backward pass, so k micro-batches give the same gradient as one batch holding them all.
    DDP averages gradients over W devices, hence the factor W.

    With a fused Adam/AdamW and no GradScaler (bf16 or fp32 on CUDA) nothing is read on the host: the statistics
    stay () tensors on the device and the skip of a non-finite update is decided there (`_apply_update_on_device`,
    the same parameters as the synced path bit for bit, tested). Under DDP the token count is still all-reduced
    through the host, one small sync per update.
    """
    device = micro_batches[0].src.device
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    (total_tokens,) = _all_reduce_sum([float(sum(b.n_tgt_tokens for b in micro_batches))], device)
    optimizer.zero_grad(set_to_none=True)
    loss_sum, nll_sum = _accumulate_gradients(
        model, micro_batches, world / total_tokens, train=train, precision=precision, scaler=scaler, pad_id=pad_id
    )
    if skips_on_device(optimizer, scaler):
        sums = torch.stack([loss_sum, nll_sum]).double()  # (2,) float64, read by nobody until the trainer logs
        if world > 1:
            torch.distributed.all_reduce(sums)
        stats = UpdateStats(sums[0] / total_tokens, sums[1] / total_tokens, int(total_tokens), math.nan, False)
        return _apply_update_on_device(model, optimizer, lr=lr, train=train, stats=stats)
    loss_total, nll_total = _all_reduce_sum([loss_sum.item(), nll_sum.item()], device)
    stats = UpdateStats(loss_total / total_tokens, nll_total / total_tokens, int(total_tokens), math.nan, False)
    return _apply_update(model, optimizer, lr=lr, train=train, scaler=scaler, stats=stats)


def _accumulate_gradients(
    model: nn.Module,
    micro_batches: Sequence,
    factor: float,
    *,
    train: TrainConfig,
    precision: str,
    scaler: torch.amp.GradScaler | None,
    pad_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward over the micro-batches, each loss scaled by `factor` (W / the update's target tokens)
    before its backward pass; DDP all-reduces on the last one. Returns the summed loss and NLL, () on the device."""
    loss_sum = nll_sum = torch.zeros((), device=micro_batches[0].src.device)
    for i, batch in enumerate(micro_batches):
        with _sync_context(model, last=i == len(micro_batches) - 1):
            loss, nll = batch_loss(
                model, batch, precision=precision, epsilon=train.label_smoothing, pad_id=pad_id, fused=train.fused_loss
            )
            scaled = loss * factor
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        loss_sum, nll_sum = loss_sum + loss.detach(), nll_sum + nll.detach()
    return loss_sum, nll_sum


def _apply_update(model, optimizer, *, lr: float, train: TrainConfig, scaler, stats: UpdateStats) -> UpdateStats:
    """Unscale, clip, and step; skip the step on a non-finite loss or gradient, or an fp16 overflow.

    Without a GradScaler (fp32, bf16) nothing else would catch a NaN/inf gradient under a finite loss: clipping
    would spread it and Adam would write it into every weight.
    """
    for group in optimizer.param_groups:
        group["lr"] = lr
    if not math.isfinite(stats.loss):
        optimizer.zero_grad(set_to_none=True)
        stats.skipped = stats.nonfinite = True
        return stats
    if scaler is not None:
        scaler.unscale_(optimizer)
    max_norm = train.clip_norm if train.clip_norm > 0 else math.inf
    stats.grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    if scaler is None and not math.isfinite(stats.grad_norm):
        optimizer.zero_grad(set_to_none=True)
        stats.skipped = stats.nonfinite = True
        return stats
    if scaler is not None:
        scale_before = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        stats.skipped = scaler.get_scale() < scale_before  # the scaler skipped the step on inf/nan gradients
    else:
        optimizer.step()
    return stats


def _apply_update_on_device(model, optimizer, *, lr: float, train: TrainConfig, stats: UpdateStats) -> UpdateStats:
    """Clip and step with no host-device sync: a non-finite loss or gradient norm becomes the optimizer's
    `found_inf`, on which the fused kernel leaves weights, moments and step count untouched (as `_apply_update`
    would by not stepping). Clipping still runs on such an update; its NaN gradients are never applied."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    max_norm = train.clip_norm if train.clip_norm > 0 else math.inf
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # () on the device
    finite_loss = torch.isfinite(stats.loss)
    nonfinite = ~(finite_loss & torch.isfinite(norm))  # () bool
    optimizer.found_inf, optimizer.grad_scale = nonfinite.float(), None  # as GradScaler.step hands them over
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf, optimizer.grad_scale
    stats.grad_norm = torch.where(finite_loss, norm, math.nan)  # nan when the loss was (as `_apply_update`)
    stats.skipped = stats.nonfinite = nonfinite
    return stats


def micro_batch_count(update_tokens: int, mean_batch_tokens: float, world_size: int) -> int:
    """Micro-batches per device per update so that one update holds about `update_tokens` target tokens."""
    return max(1, round(update_tokens / max(mean_batch_tokens * world_size, 1.0)))


def update_size_warning(
    update_tokens: int, max_tokens: int, mean_batch_tokens: float, world_size: int, accumulation: int
) -> str | None:
    """A warning when updates will hold far more than `update_tokens` target tokens (more than 1.5 times), as when
    many devices each fill one micro-batch of `max_tokens`; None when the update size is about right."""
    expected = mean_batch_tokens * world_size * accumulation
    if expected <= 1.5 * update_tokens:
        return None
    return (
        f"updates will hold about {expected:,.0f} target tokens ({world_size} device(s) x {accumulation} "
        f"micro-batch(es) of about {mean_batch_tokens:,.0f}), {expected / update_tokens:.1f}x train.update_tokens "
        f"({update_tokens:,}); lower train.max_tokens to about {max_tokens * update_tokens / expected:,.0f} to "
        "honour it, or raise train.update_tokens and retune the learning rate"
    )
