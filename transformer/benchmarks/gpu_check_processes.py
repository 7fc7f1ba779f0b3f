"""The paths of `make gpu-check` that start `transformer train` in processes of their own (gpu_check.py runs them):

- torchrun: `torchrun --nproc_per_node 1 ... transformer train` with 2 micro-batches per update, against the same
  run in this process without DDP: one process in a process group, the model wrapped in DDP (its all-reduce over
  one rank), the first micro-batch under DDP's `no_sync`, as with more GPUs.
- kill-resume: `transformer train` stopped by SIGTERM mid-run, then `--resume`d to the end, against the same run
  uninterrupted. On CUDA in fp16, so the resumed run must also restore the GradScaler's state (its scale, checked
  in the last checkpoint); the CPU smoke mode has no fp16 and uses bf16 (no scaler).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

from transformer.benchmarks.gpu_check_runs import (
    TINY,
    Context,
    compare_losses,
    once,
    read_losses,
    reference_run,
    require,
    tail,
    train,
)
from transformer.benchmarks.stamps import ROOT


def _train_command(ctx: Context, name: str, updates: int, launcher: list[str], *extra: str) -> list[str]:
    sets = [a for s in ctx.overrides(name, updates, *extra) for a in ("--set", s)]
    return [*launcher, "-m", "transformer", "train", "--config", str(TINY), "--no-progress", *sets]


ACCUMULATION = ("train.accumulation=2", "train.max_tokens=512")  # two micro-batches per update


def check_torchrun(ctx: Context) -> str:
    """`torchrun --nproc_per_node 1` with 2 micro-batches per update trains on the device under DDP (no_sync on the
    first) and gives the losses of the same run without DDP."""
    n = ctx.sizes.short_updates
    plain = once(ctx, "accumulation", lambda: train(ctx, "accumulation", n, *ACCUMULATION))
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"]
    done = subprocess.run(
        _train_command(ctx, "torchrun", n, launcher, *ACCUMULATION),
        cwd=ROOT,
        env=ctx.env(),
        capture_output=True,
        text=True,
        timeout=ctx.timeout,
    )
    require(done.returncode == 0, f"exit code {done.returncode}: {tail(done.stdout + done.stderr)}")
    where = "cuda:0" if ctx.device.type == "cuda" else "cpu"
    require(
        f"on {where} x1 (DDP)" in done.stderr,
        f"the run did not say it trained on {where} under DDP: {tail(done.stderr)}",
    )
    worst = compare_losses(read_losses(ctx.work / "torchrun"), plain.losses, n, ctx.tolerance)
    return (
        f"trained on {where} under DDP, 2 micro-batches per update (no_sync on the first): {n} losses within "
        f"{worst:.1e} of the run without DDP (tolerance {ctx.tolerance:g})"
    )


def _kill_at_update(command: list[str], ctx: Context) -> str:
    """Start `command`, SIGTERM it once it logs update `kill_at`; its output (the run must exit 0)."""
    proc = subprocess.Popen(
        command, cwd=ROOT, env=ctx.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    watchdog = threading.Timer(ctx.timeout, proc.kill)
    watchdog.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(f"update {ctx.sizes.kill_at} "):
                proc.send_signal(signal.SIGTERM)
                break
        lines.append(proc.communicate()[0])
    finally:
        watchdog.cancel()
    output = "".join(lines)
    require(proc.returncode == 0, f"the killed run exited {proc.returncode}: {tail(output)}")
    return output


def _scale(checkpoint: Path) -> float | None:
    from transformer.checkpoint import load_checkpoint

    scaler = load_checkpoint(checkpoint).get("scaler")
    return float(scaler["scale"]) if scaler else None


def check_kill_resume(ctx: Context) -> str:
    """SIGTERM mid-run, then --resume to the end: the uninterrupted run's per-update losses (and, in fp16, its loss
    scale at the end)."""
    from transformer.checkpoint import load_checkpoint

    n, fp16 = ctx.sizes.reference_updates, ctx.device.type == "cuda"
    extra = ["train.precision=fp16"] if fp16 else []
    reference = once(ctx, "fp16", lambda: train(ctx, "fp16", n, *extra)) if fp16 else reference_run(ctx)
    command = _train_command(ctx, "killed", n, [sys.executable], *extra)
    _kill_at_update(command, ctx)
    stopped = load_checkpoint(ctx.work / "killed" / "checkpoint_last.pt")["step"]
    require(ctx.sizes.kill_at <= stopped < n, f"the killed run saved update {stopped}, not one before {n}")
    done = subprocess.run(
        [*command, "--resume"], cwd=ROOT, env=ctx.env(), capture_output=True, text=True, timeout=ctx.timeout
    )
    require(done.returncode == 0, f"the resumed run exited {done.returncode}: {tail(done.stdout + done.stderr)}")
    worst = compare_losses(read_losses(ctx.work / "killed"), reference.losses, n, ctx.tolerance)
    scales = _scale(ctx.work / "killed" / "checkpoint_last.pt"), _scale(reference.out_dir / "checkpoint_last.pt")
    require(scales[0] == scales[1], f"the resumed run ends with loss scale {scales[0]}, the uninterrupted {scales[1]}")
    how = f"fp16, loss scale {scales[0]:g} as uninterrupted" if fp16 else "bf16 (CPU smoke: no fp16, no scaler)"
    return (
        f"SIGTERM at update {stopped}, resumed to {n} ({how}): losses within {worst:.1e} of the uninterrupted "
        f"run (tolerance {ctx.tolerance:g})"
    )
