"""The training paths of `make gpu-check` run in this process (gpu_check.py runs them), each held against an
independent expectation:

- bf16: the reference run's loss falls, and a run whose gradients are made non-finite at one update skips it,
  counts it, and leaves the weights and the schedule where they were. On CUDA, bf16 with the fused Adam decides the
  skip on the device (found_inf, no host read); the CPU smoke mode uses a fused Adam on the CPU for the same path.
- fp16 with the loss scaler: the same forced overflow, and the scale halves; on CUDA the optimizer is the fused Adam
  (`optim.make_optimizer`), so this is the fp16 + fused Adam + GradScaler branch of the update. fp16 autocast is
  CUDA only (precision.py), so the CPU smoke mode runs bf16 autocast with a GradScaler forced on and a fused Adam on
  the CPU: the same branch, not fp16.
- prefetch: the reference (prefetcher on: on CUDA pinned batches copied on a side stream) against a run without it.
- compile: length-bucketed batches eager against compiled, dropout 0 and fp32 (TF32 matrix products on CUDA), so
  that only the kernels differ: tolerance 1e-3, which a 0.5% error in any loss exceeds. `torch.compile` is given
  `dynamic=True`, so one compilation serves every bucket and batch size (the line counts the graphs compiled); the
  CPU smoke mode uses the aot_eager backend.
- unfused-loss: `train.fused_loss: false` (the full-logits loss) with a validation and its greedy BLEU every few
  updates, against the reference: the same losses (within the larger of the two tolerances: another computation
  of the same loss), and a finite validation loss and BLEU logged.

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
    Context,
    Run,
    compare_losses,
    read_validations,
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
        require(
            math.isclose(rate, expected, rel_tol=1e-9),
            f"update call {call} ran at lr {rate:.4g}, the "
            f"schedule's rate for update {applied + 1} is {expected:.4g}: a skip moved the schedule",
        )
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


def _optimizer_name(optimizer) -> str:
    fused = " (fused)" if optimizer.defaults.get("fused") else " (unfused)"
    return type(optimizer).__name__ + fused


def check_fp16_scaler(ctx: Context) -> str:
    """fp16 with the GradScaler and the fused Adam (CPU smoke: bf16 autocast, a GradScaler forced on, the fused Adam
    on the CPU); a forced overflow."""
    spy, seen = UpdateSpy(ctx.sizes.force_at), []

    def prepare(trainer) -> None:
        if ctx.smoke:
            trainer.setup.scaler = torch.amp.GradScaler("cpu")
        seen.append(_optimizer_name(trainer.optimizer))

    extra = [] if ctx.smoke else ["train.precision=fp16"]
    with spy.installed(), _fused_adam_on_cpu() if ctx.smoke else contextlib.nullcontext():
        run = train(ctx, "fp16-scaler", ctx.sizes.short_updates, *extra, prepare=prepare)
    smoke = " (CPU smoke: bf16 autocast with a GradScaler forced on; fp16 is CUDA only)" if ctx.smoke else ""
    return f"{check_skip(spy, run)}; {seen[0]} with a GradScaler{smoke}"


def check_prefetch(ctx: Context) -> str:
    """The reference (prefetcher on) and a run without the prefetcher: the same losses."""
    reference, n = reference_run(ctx), ctx.sizes.short_updates
    run = train(ctx, "no-prefetch", n, "train.prefetch=0")
    worst = compare_losses(run.losses, reference.losses, n, ctx.tolerance)
    pinned = " (pinned, copied on a side stream)" if ctx.device.type == "cuda" else ""
    return f"prefetch 2{pinned} vs 0: {n} losses within {worst:.1e} (tolerance {ctx.tolerance:g})"


@contextlib.contextmanager
def _compile_once(ctx: Context) -> Iterator[dict]:
    """torch.compile with dynamic=True (CPU smoke mode: the aot_eager backend); yields a dict that gets the number
    of graphs compiled (Dynamo's counters) when the block ends."""
    import torch._dynamo

    real_compile, counted = torch.compile, {}
    backend = {"backend": "aot_eager"} if ctx.smoke else {}
    torch.compile = functools.partial(real_compile, dynamic=True, **backend)
    torch._dynamo.reset()
    try:
        yield counted
    finally:
        torch.compile = real_compile
        counted["graphs"] = torch._dynamo.utils.counters["stats"]["unique_graphs"]


def check_compile(ctx: Context) -> str:
    """Length-bucketed batches, eager and compiled, dropout 0 and fp32: the same losses within the compile
    tolerance."""
    n, exact = ctx.sizes.short_updates, ["train.length_buckets=true", "model.dropout=0", "train.precision=fp32"]
    eager = train(ctx, "buckets-eager", n, *exact)
    start = time.perf_counter()
    with _compile_once(ctx) as counted:
        compiled = train(ctx, "buckets-compiled", n, *exact, "train.compile=true")
    worst = compare_losses(compiled.losses, eager.losses, n, ctx.compile_tolerance)
    how = "aot_eager backend" if ctx.smoke else "inductor"
    return (
        f"{n} updates compiled ({how}, dynamic shapes, {counted['graphs']} graph(s), "
        f"{time.perf_counter() - start:.0f} s with compilation) against eager, dropout 0, fp32: losses within "
        f"{worst:.1e} (tolerance {ctx.compile_tolerance:g})"
    )


def check_unfused_loss(ctx: Context) -> str:
    """`train.fused_loss: false`, validating with greedy BLEU every few updates: the reference's losses, and each
    validation logged with a finite loss and BLEU."""
    reference, n = reference_run(ctx), ctx.sizes.short_updates
    every = max(n // 2, 1)
    run = train(
        ctx,
        "unfused-loss",
        n,
        "train.fused_loss=false",
        f"train.valid_every={every}",
        "train.valid_bleu=true",
        "train.valid_bleu_sentences=20",
    )
    tolerance = max(ctx.tolerance, ctx.compile_tolerance)  # another computation of the loss: kernels differ
    worst = compare_losses(run.losses, reference.losses, n, tolerance)
    valid = read_validations(run.out_dir)
    require(len(valid) >= n // every, f"{len(valid)} validations logged, {n // every} expected")
    require(
        all(
            math.isfinite(v.get("valid_loss", math.nan)) and math.isfinite(v.get("valid_bleu", math.nan)) for v in valid
        ),
        f"a validation without a finite loss and BLEU: {valid}",
    )
    last = valid[-1]
    return (
        f"full-logits loss: {n} losses within {worst:.1e} of the reference (tolerance {tolerance:g}); "
        f"{len(valid)} validations with greedy BLEU, the last loss {last['valid_loss']:.3f}, "
        f"BLEU {last['valid_bleu']:.2f}"
    )
