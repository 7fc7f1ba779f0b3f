"""The paths of `make gpu-check` that start `transformer train` in processes of their own (gpu_check.py runs them):

- torchrun: `torchrun --nproc_per_node 1 ... transformer train` against the reference run: one process in a
  process group, the model wrapped in DDP (its all-reduce over one rank), as with more GPUs.
- kill-resume: `transformer train` stopped by SIGTERM mid-run, then `--resume`d to the end, against the reference.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

from transformer.benchmarks.gpu_check_runs import (
    TINY,
    Context,
    compare_losses,
    read_losses,
    reference_run,
    require,
    tail,
)
from transformer.benchmarks.stamps import ROOT


def _train_command(ctx: Context, name: str, updates: int, launcher: list[str]) -> list[str]:
    sets = [a for s in ctx.overrides(name, updates) for a in ("--set", s)]
    return [*launcher, "-m", "transformer", "train", "--config", str(TINY), "--no-progress", *sets]


def check_torchrun(ctx: Context) -> str:
    """`torchrun --nproc_per_node 1` trains on the device and gives the reference's losses."""
    reference, n = reference_run(ctx), ctx.sizes.short_updates
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"]
    done = subprocess.run(_train_command(ctx, "torchrun", n, launcher), cwd=ROOT, env=ctx.env(), capture_output=True,
                          text=True, timeout=ctx.timeout)  # fmt: skip
    require(done.returncode == 0, f"exit code {done.returncode}: {tail(done.stdout + done.stderr)}")
    where = "cuda:0" if ctx.device.type == "cuda" else "cpu"
    require(
        f"on {where} x1 (DDP)" in done.stderr,
        f"the run did not say it trained on {where} under DDP: {tail(done.stderr)}",
    )
    worst = compare_losses(read_losses(ctx.work / "torchrun"), reference.losses, n, ctx.tolerance)
    return f"trained on {where} under DDP, {n} losses within {worst:.1e} of the plain run (tolerance {ctx.tolerance:g})"


def _kill_at_update(command: list[str], ctx: Context) -> str:
    """Start `command`, SIGTERM it once it logs update `kill_at`; its output (the run must exit 0)."""
    proc = subprocess.Popen(command, cwd=ROOT, env=ctx.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
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


def check_kill_resume(ctx: Context) -> str:
    """SIGTERM mid-run, then --resume to the end: the reference's per-update losses."""
    from transformer.checkpoint import load_checkpoint

    reference, n = reference_run(ctx), ctx.sizes.reference_updates
    command = _train_command(ctx, "killed", n, [sys.executable])
    _kill_at_update(command, ctx)
    stopped = load_checkpoint(ctx.work / "killed" / "checkpoint_last.pt")["step"]
    require(ctx.sizes.kill_at <= stopped < n, f"the killed run saved update {stopped}, not one before {n}")
    done = subprocess.run([*command, "--resume"], cwd=ROOT, env=ctx.env(), capture_output=True, text=True,
                          timeout=ctx.timeout)  # fmt: skip
    require(done.returncode == 0, f"the resumed run exited {done.returncode}: {tail(done.stdout + done.stderr)}")
    worst = compare_losses(read_losses(ctx.work / "killed"), reference.losses, n, ctx.tolerance)
    return (f"SIGTERM at update {stopped}, resumed to {n}: losses within {worst:.1e} of the uninterrupted run "
            f"(tolerance {ctx.tolerance:g})")  # fmt: skip
