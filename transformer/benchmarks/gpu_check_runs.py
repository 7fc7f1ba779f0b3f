"""What the checks of `make gpu-check` share: their outcome exceptions, the sizes and tolerances of the mode, the
tiny training runs they make in this process, and the two runs several checks compare with (made once, on first use).

The tiny runs: configs/tiny.yaml's model on the first 1,000 short Bible verses (data/bible-es-en/short, at most 48
tokens a side), bf16, a loss logged at every update. On a GPU the decoding checks get a model that translates
(`Context.decoder_overrides`): a tiny model after a few dozen updates repeats one token, and agreement between
precisions means nothing on such output.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from transformer.benchmarks.stamps import ROOT
from transformer.config import Config, load_config
from transformer.training import optim

TINY = ROOT / "configs" / "tiny.yaml"
DEMO = ROOT / "configs" / "demo.yaml"  # the decoding model's shape, on a GPU
SHORT = ROOT / "data" / "bible-es-en" / "short"  # verses of at most 20 words: at most 48 tokens kept below
SMOKE_BUCKET = 48  # data.max_tokens_per_sentence below (the short verses' longest kept side)
# What the check runs, for its stamp (stamps.step_stamp): the library, its own modules and entry point, its configs
# and data; and the optional packages whose versions change what it finds.
CHECK_DEPENDS = (
    "transformer/*.py",
    "transformer/model",
    "transformer/data",
    "transformer/training",
    "transformer/decoding",
    "transformer/interop",
    "transformer/commands",
    "transformer/benchmarks/gpu_check*.py",
    "transformer/benchmarks/decode.py",
    "scripts/gpu_check.py",
    "configs/tiny.yaml",
    "configs/demo.yaml",
    "data/bible-es-en/short",
)
CHECK_PACKAGES = ("transformers", "ctranslate2", "matplotlib", "sacrebleu")


def check_signature(smoke: bool) -> str:
    return "gpu_check.py" + (" --cpu-smoke" if smoke else "")


class CheckFailedError(Exception):
    """A check's expectation did not hold: the message says which and by how much."""


class CheckSkippedError(Exception):
    """A check that cannot run here (a package missing): the message says why."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailedError(message)


@dataclass(frozen=True)
class Sizes:
    reference_updates: int  # the bf16 reference run, and the run that is killed and resumed
    kill_at: int  # SIGTERM once this update is logged
    short_updates: int  # every other run
    force_at: int  # the update whose gradients are made non-finite
    decoder_updates: int  # the decoding model's run


GPU_SIZES = Sizes(reference_updates=40, kill_at=8, short_updates=12, force_at=4, decoder_updates=1000)
SMOKE_SIZES = Sizes(reference_updates=12, kill_at=4, short_updates=6, force_at=3, decoder_updates=6)


def short_splits() -> list[str]:
    """--set values for train, valid and test from the short verses' files (whole; the callers take slices)."""
    files = (("train", "train"), ("valid", "dev"), ("test", "test"))
    return [f"data.{split}.tsv={SHORT / f'{file}.tsv.xz'}" for split, file in files]


@dataclass
class Run:
    """One finished training run: its config, the trainer's result, its per-update losses and folder."""

    config: Config
    result: dict[str, Any]
    losses: dict[int, float]
    out_dir: Path
    skips_on_device: bool = False


@dataclass
class Context:
    """What every check reads: the device, the mode, the work folder, the sizes and tolerances, the reference."""

    device: torch.device
    smoke: bool
    work: Path
    sizes: Sizes
    tolerance: float  # largest relative difference of a loss, same computation in another process or order
    compile_tolerance: float  # the same, compiled against eager kernels
    timeout: float  # seconds for each subprocess
    reference: Run | None = None  # the bf16 reference run, made on first use (`reference_run`)
    decoder: Run | None = None  # the decoding checks' model, made on first use (`decoder_run`)
    failed: set[str] = dataclasses.field(default_factory=set)  # runs whose training failed: not tried again

    def overrides(self, name: str, updates: int, *extra: str) -> list[str]:
        """The --set values of a run named `name`: the tiny model on short verses, a loss logged every update."""
        sizes = [
            "data.train.max_examples=1000",
            "data.valid.max_examples=40",
            "data.test.max_examples=40",
            f"data.max_tokens_per_sentence={SMOKE_BUCKET}",
            f"data.cache_dir={self.work / 'cache'}",
        ]
        train = [
            f"train.out_dir={self.work / name}",
            f"train.max_steps={updates}",
            "train.precision=bf16",
            "train.log_every=1",
            "train.valid_every=0",
            "train.valid_bleu=false",
            "train.save_every=0",
        ]
        return [*short_splits(), *sizes, *train, *(["train.threads=1"] if self.smoke else []), *extra]

    def decoder_overrides(self, updates: int) -> list[str]:
        """configs/demo.yaml's model on all short verses with 4k-token updates. After 1,000 updates (3.7M target
        tokens; 18 minutes on one CPU thread when this was checked) it translates the 200 test verses at 9.4 BLEU
        greedy, 11.6 beam 4, no longer repeating one token, so decoding has real choices to make."""
        train = [
            f"train.out_dir={self.work / 'decoder'}",
            f"train.max_steps={updates}",
            "train.max_time=null",
            "train.max_tokens=4096",
            "train.update_tokens=4096",
            "train.precision=bf16",
            "train.log_every=50",
            "train.valid_every=0",
            "train.save_every=0",
        ]
        return [*short_splits(), "data.test.max_examples=200", f"data.cache_dir={self.work / 'cache'}", *train]

    def env(self) -> dict[str, str]:
        """The environment of a subprocess: this checkout first on the path; on the CPU smoke run no GPU, 1 thread."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        if self.smoke:
            env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
        return env


def read_losses(out_dir: Path) -> dict[int, float]:
    """{update: training loss} from a run's metrics.jsonl (the last line of an update wins, as after a resume)."""
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in records if "loss" in r and "valid_loss" not in r}


def read_validations(out_dir: Path) -> list[dict]:
    """The validation lines of a run's metrics.jsonl (those with a valid_loss), in order."""
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in records if "valid_loss" in r]


def compare_losses(run: dict[int, float], reference: dict[int, float], updates: int, tolerance: float) -> float:
    """The largest relative difference between the two runs' losses at updates 1..`updates`; fails past
    `tolerance`, naming the first update that differs that much."""
    missing = [s for s in range(1, updates + 1) if s not in run or s not in reference]
    require(not missing, f"no logged loss at update(s) {missing[:5]}")
    worst = 0.0
    for step in range(1, updates + 1):
        a, b = run[step], reference[step]
        diff = abs(a - b) / max(abs(b), 1e-12) if math.isfinite(a) else math.inf
        require(diff <= tolerance, f"update {step}: loss {a:.6g} against {b:.6g} (relative {diff:.1e} > {tolerance:g})")
        worst = max(worst, diff)
    return worst


def train(ctx: Context, name: str, updates: int, *extra: str, prepare=None, config: Config | None = None) -> Run:
    """Train in this process (`prepare(trainer)` first, if given), the tiny model unless `config` is given; no
    validation at the end."""
    from transformer.training.trainer import Trainer

    config = config or load_config(TINY, ctx.overrides(name, updates, *extra))
    trainer = Trainer(config, progress=False)
    if prepare is not None:
        prepare(trainer)
    result = trainer.run(final_validation=False)
    on_device = optim.skips_on_device(trainer.optimizer, trainer.setup.scaler)
    return Run(config, result, read_losses(Path(config.train.out_dir)), Path(config.train.out_dir), on_device)


def tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


# ------------------------------------------------------------------------------------------------ shared runs


def once(ctx: Context, name: str, make) -> Run:
    """`make()`'s run, made once per check session: a failure fails each check that needs it, without a retry."""
    require(name not in ctx.failed, f"needs the {name} run, which failed")
    ctx.failed.add(name)
    run = make()
    ctx.failed.discard(name)
    return run


def reference_run(ctx: Context) -> Run:
    """The bf16 reference run (the tiny model, prefetcher on), trained on first use."""
    if ctx.reference is None:
        ctx.reference = once(ctx, "reference", lambda: train(ctx, "reference", ctx.sizes.reference_updates))
    return ctx.reference


def decoder_run(ctx: Context) -> Run:
    """The decoding checks' model, trained in bf16 on first use: on a GPU `Context.decoder_overrides`; in the CPU
    smoke mode the tiny model pre-LN as configs/demo.yaml's is (so that the export takes the same path), whose
    outputs are too short to mean much: the smoke run checks the plumbing."""
    if ctx.decoder is None:
        n = ctx.sizes.decoder_updates
        smoke = load_config(TINY, ctx.overrides("decoder", n, "model.norm_first=true"))
        config = smoke if ctx.smoke else load_config(DEMO, ctx.decoder_overrides(n))
        ctx.decoder = once(ctx, "decoding model", lambda: train(ctx, "decoder", n, config=config))
        require(ctx.decoder.result["step"] == n, f"the decoding model stopped at update {ctx.decoder.result['step']}")
    return ctx.decoder
