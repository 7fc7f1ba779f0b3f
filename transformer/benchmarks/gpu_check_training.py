"""The training paths of `make gpu-check` run in this process (gpu_check.py runs them), each held against an
independent expectation:

- bf16: the reference run's loss falls, and a run whose gradients are made non-finite at one update skips it,
  counts it, and leaves the weights and the schedule where they were. On CUDA, bf16 with the fused Adam decides the
  skip on the device (found_inf, no host read); the CPU smoke mode uses a fused Adam on the CPU for the same path.
- fp16 with the loss scaler: the same forced overflow, and the scale halves. fp16 autocast is CUDA only
  (precision.py), so the CPU smoke mode runs bf16 autocast with a GradScaler forced on: the scaler's path, not fp16.
- prefetch: the reference (prefetcher on: on CUDA pinned batches copied on a side stream) against a run without it.
- compile: length-bucketed batches eager against compiled (the CPU smoke mode: the aot_eager backend and a single
  bucket, so that one compilation serves every batch).

The forced overflow: the loss's gradient multiplied by inf while the loss stays finite, which is what an fp16
overflow in the backward pass looks like to the update.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Iterator

import torch

from transformer.benchmarks.gpu_check_runs import (
    SMOKE_BUCKET,
    Context,
    Run,
    compare_losses,
    reference_run,
    require,
    train,
)
from transformer.training import optim

# ------------------------------------------------------------------------------------------------ forced overflow


def _poisoned(batch_loss):
    """`optim.batch_loss` whose loss passes back a gradient times inf: non-finite gradients under a finite loss."""

    def poisoned(*args, **kwargs):
        loss, nll = batch_loss(*args, **kwargs)
        loss.register_hook(lambda grad: grad * math.inf)
        return loss, nll

    return poisoned


class UpdateSpy:
    """Stands in for `optim.train_update` during a run: records each update's learning rate and skip flag, and at
    update `force_at` makes the gradients non-finite and notes whether the weights and the loss scale moved."""

    def __init__(self, force_at: int) -> None:
        self.force_at, self.rates, self.skipped = force_at, [], []
        self.weights_moved: bool | None = None
        self.scales: tuple[float, float] | None = None  # the loss scale before and after the forced update

    @contextlib.contextmanager
    def installed(self) -> Iterator[UpdateSpy]:
        real_update, real_loss = optim.train_update, optim.batch_loss

        def update(model, micro_batches, optimizer, *, lr, scaler, **kwargs):
            self.rates.append(lr)
            forced = len(self.rates) == self.force_at
            before = [p.detach().clone() for p in model.parameters()] if forced else []
            scale = scaler.get_scale() if forced and scaler is not None else None
            optim.batch_loss = _poisoned(real_loss) if forced else real_loss
            try:
                stats = real_update(model, micro_batches, optimizer, lr=lr, scaler=scaler, **kwargs)
            finally:
                optim.batch_loss = real_loss
            self.skipped.append(bool(stats.skipped))  # a device flag is read here: one sync, for the check only
            if forced:
                self.weights_moved = any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
                self.scales = (scale, scaler.get_scale()) if scaler is not None else None
            return stats

        optim.train_update = update
        try:
            yield self
        finally:
            optim.train_update, optim.batch_loss = real_update, real_loss


def check_skip(spy: UpdateSpy, run: Run) -> str:
    """The forced update was skipped without moving the weights, every update got the schedule's rate for the
    applied updates before it (a skip moves nothing), the trainer counted the skips, and a scaler halved its scale."""
    k = spy.force_at
    require(len(spy.skipped) >= k and spy.skipped[k - 1], f"update {k}, with non-finite gradients, was applied")
    require(spy.weights_moved is False, f"the weights moved on the skipped update {k}")
    applied = 0
    for call, (rate, skipped) in enumerate(zip(spy.rates, spy.skipped), start=1):
        expected = optim.learning_rate(applied + 1, run.config.train, run.config.model)
        require(math.isclose(rate, expected, rel_tol=1e-9), f"update call {call} ran at lr {rate:.4g}, the "
                f"schedule's rate for update {applied + 1} is {expected:.4g}: a skip moved the schedule")  # fmt: skip
        applied += not skipped
    counted = run.result["skipped"]
    require(counted == sum(spy.skipped), f"the trainer counted {counted} skipped updates, {sum(spy.skipped)} were")
    require(run.result["step"] == applied, f"the trainer counted {run.result['step']} updates, {applied} applied")
    detail = f"non-finite gradients at update {k}: skipped, counted ({counted} of {len(spy.rates)}), schedule held"
    if spy.scales is not None:
        before, after = spy.scales
        require(after == before * 0.5, f"the loss scale went {before:g} -> {after:g}, not halved")
        detail += f", loss scale {before:g} -> {after:g}"
    return detail + ", weights unchanged"


# ------------------------------------------------------------------------------------------------ the checks


@contextlib.contextmanager
def _fused_adam_on_cpu() -> Iterator[None]:
    """The optimizer `make_optimizer` gives on CUDA (a fused Adam) on the CPU too, where this torch has one, so that
    the CPU smoke mode decides the skip on the device as CUDA does."""
    real = optim.make_optimizer
    fused = functools.partial(torch.optim.Adam, lr=0.0, fused=True)
    try:
        fused(torch.nn.Linear(1, 1).parameters())
    except (RuntimeError, TypeError):  # no fused Adam on this CPU: the host decides, as the line will say
        yield
        return
    optim.make_optimizer = lambda model, cfg: fused(model.parameters(), betas=cfg.adam_betas, eps=cfg.adam_eps)
    try:
        yield
    finally:
        optim.make_optimizer = real


def check_bf16(ctx: Context) -> str:
    """The reference run trains (its loss falls by 5% or more); a forced overflow is skipped as `check_skip` says."""
    n, losses = ctx.sizes.reference_updates, reference_run(ctx).losses
    require(sorted(losses) == list(range(1, n + 1)), f"losses logged for {len(losses)} of {n} updates")
    require(all(math.isfinite(v) for v in losses.values()), "a non-finite loss in the reference run")
    require(losses[n] < 0.95 * losses[1], f"the loss did not fall: {losses[1]:.3f} -> {losses[n]:.3f}")
    spy = UpdateSpy(ctx.sizes.force_at)
    with spy.installed(), _fused_adam_on_cpu() if ctx.smoke else contextlib.nullcontext():
        run = train(ctx, "bf16-skip", ctx.sizes.short_updates)
    where = "on the device (fused Adam's found_inf)" if run.skips_on_device else "on the host"
    smoke = "; CPU smoke: the fused Adam on the CPU" if ctx.smoke and run.skips_on_device else ""
    return f"{n} updates, loss {losses[1]:.2f} -> {losses[n]:.2f}; {check_skip(spy, run)}; decided {where}{smoke}"


def check_fp16_scaler(ctx: Context) -> str:
    """fp16 with the GradScaler (CPU smoke: bf16 autocast with a GradScaler forced on); a forced overflow."""
    spy = UpdateSpy(ctx.sizes.force_at)
    if ctx.smoke:
        force_scaler = lambda trainer: setattr(trainer.setup, "scaler", torch.amp.GradScaler("cpu"))  # noqa: E731
        with spy.installed():
            run = train(ctx, "fp16-scaler", ctx.sizes.short_updates, prepare=force_scaler)
        return check_skip(spy, run) + " (CPU smoke: bf16 autocast with a GradScaler forced on; fp16 is CUDA only)"
    with spy.installed():
        run = train(ctx, "fp16-scaler", ctx.sizes.short_updates, "train.precision=fp16")
    return check_skip(spy, run)


def check_prefetch(ctx: Context) -> str:
    """The reference (prefetcher on) and a run without the prefetcher: the same losses."""
    reference, n = reference_run(ctx), ctx.sizes.short_updates
    run = train(ctx, "no-prefetch", n, "train.prefetch=0")
    worst = compare_losses(run.losses, reference.losses, n, ctx.tolerance)
    pinned = " (pinned, copied on a side stream)" if ctx.device.type == "cuda" else ""
    return f"prefetch 2{pinned} vs 0: {n} losses within {worst:.1e} (tolerance {ctx.tolerance:g})"


@contextlib.contextmanager
def _smoke_compile(ctx: Context) -> Iterator[None]:
    """CPU smoke mode: torch.compile with the aot_eager backend, and one length bucket (SMOKE_BUCKET)."""
    if not ctx.smoke:
        yield
        return
    from transformer.data import batching

    real_compile, real_buckets = torch.compile, batching.LENGTH_BUCKETS
    torch.compile, batching.LENGTH_BUCKETS = functools.partial(real_compile, backend="aot_eager"), (SMOKE_BUCKET,)
    try:
        yield
    finally:
        torch.compile, batching.LENGTH_BUCKETS = real_compile, real_buckets


def check_compile(ctx: Context) -> str:
    """Length-bucketed batches, eager and compiled: the same losses within the compile tolerance."""
    n = ctx.sizes.short_updates
    with _smoke_compile(ctx):
        eager = train(ctx, "buckets-eager", n, "train.length_buckets=true")
        start = time.perf_counter()
        compiled = train(ctx, "buckets-compiled", n, "train.length_buckets=true", "train.compile=true")
    worst = compare_losses(compiled.losses, eager.losses, n, ctx.compile_tolerance)
    how = "aot_eager backend, one length bucket" if ctx.smoke else "inductor, length buckets"
    return (f"{n} updates compiled ({how}, {time.perf_counter() - start:.0f} s with compilation) against eager: "
            f"losses within {worst:.1e} (tolerance {ctx.compile_tolerance:g})")  # fmt: skip
