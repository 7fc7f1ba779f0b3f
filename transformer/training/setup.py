"""Setting up a training run: the process (devices, DDP, seeds, float settings), the data, and the components
(model, optimizer, scaler) with resume or warm start. `build_run` does it in a fixed order, so that a resumed run
draws the same random numbers as an uninterrupted one; the training loop (trainer.py) then only trains."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from transformer.checkpoint import load_checkpoint, load_weights, model_state
from transformer.config import Config, parse_duration
from transformer.errors import UserError
from transformer.fileio import RunLock
from transformer.precision import resolve_precision
from transformer.training import optim
from transformer.training.distributed import (
    barrier,
    init_distributed,
    prepare_group,
    restore_rng_states,
    rng_states,
    seed_everything,
)

log = logging.getLogger(__name__)


@dataclass
class RunSetup:
    """What one process trains with. `net` is `model` compiled and/or wrapped in DDP; save `model`."""

    rank: int
    world: int
    device: torch.device
    precision: str  # the resolved train.precision
    data: Any  # data.PreparedData: tokenizer and splits
    sampler: Any  # batching.TokenBatchSampler over the train split
    accumulation: int  # micro-batches per update on each device
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None  # fp16 only
    net: torch.nn.Module
    restored: dict[str, Any] | None  # step and progress of the checkpoint resumed from, if any


def setup_process(config: Config) -> tuple[int, int, torch.device, str]:
    """Check what must hold before any work, join the DDP group, set threads, TF32 and the seeds."""
    cfg = config.train
    if config.data.max_tokens_per_sentence > config.model.max_positions:
        raise UserError(
            f"data.max_tokens_per_sentence ({config.data.max_tokens_per_sentence}) exceeds model.max_positions "
            f"({config.model.max_positions}): such sentences do not fit the positional encoding; lower the first "
            "or raise the second"
        )
    rank, world, device = init_distributed()
    precision = resolve_precision(cfg.precision, device)  # before any work
    if rank == 0:
        RunLock(Path(cfg.out_dir)).check()  # refuse a busy run directory now; Trainer.run() takes the lock
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    seed_everything(cfg.seed)
    return rank, world, device, precision


def run_tokenizer(config: Config, resume: bool | str = False):
    """The tokenizer a run encodes every split with: the checkpoint's own when resuming or fine-tuning
    (train.init_from), else the SentencePiece model(s) that data.tokenizer / src_tokenizer / tgt_tokenizer name,
    else None (prepare_data trains one). The data settings that shape a new tokenizer (vocab_size, spm_*,
    character_coverage, the languages) do not apply to a checkpoint's; a named model that differs is refused."""
    from transformer.data.tokenizer import Tokenizer, tokenizer_from_files

    named = tokenizer_from_files(config.data)
    path = (Path(config.train.out_dir) / "checkpoint_last.pt" if resume is True else resume) or config.train.init_from
    if not path:
        return named
    parent = Tokenizer.from_bytes(load_checkpoint(path, mmap=True)["tokenizer"])
    if named is not None and not same_pieces(named, parent):
        files = config.data.tokenizer or f"{config.data.src_tokenizer} + {config.data.tgt_tokenizer}"
        raise UserError(
            f"data.tokenizer names {files} ({named!r}), but {path} was trained with another tokenizer "
            f"({parent!r}); fine-tuning keeps the checkpoint's: remove the data.tokenizer setting(s)"
        )
    log.info("tokenizer: %s's own (%r); data.vocab_size, spm_* and the languages do not change it", path, parent)
    return parent


def same_pieces(a, b) -> bool:
    """Whether two tokenizers give every id the same piece, on both sides, and start the decoder alike."""
    return a.pieces("src") == b.pieces("src") and a.pieces("tgt") == b.pieces("tgt") and a.bos_id == b.bos_id


def prepare_run_data(config: Config, world: int, is_main: bool, progress: bool, resume: bool | str = False):
    """Rank 0 trains the tokenizer (or takes the checkpoint's or the configured one: `run_tokenizer`) and fills
    the cache while the others wait (with their own timeout, as this can take longer than the process group's),
    then read it; evaluation splits lose pairs too long to fit."""
    from transformer.data.prepare import drop_longer, prepare_data

    group = prepare_group(parse_duration(config.train.prepare_timeout)) if world > 1 else None
    tokenizer = run_tokenizer(config, resume)
    data = prepare_data(config, progress=progress, tokenizer=tokenizer) if is_main else None
    if data is not None and "train" in data.splits:
        train_batch_plans(config, data)  # built once here, memory-mapped by the other ranks
    barrier(group)
    data = data or prepare_data(config, progress=False, tokenizer=tokenizer)
    if "train" not in data.splits:
        raise UserError("the config has no data.train split to train on")
    for name in ("valid", "test"):
        if name in data.splits:
            data.splits[name] = drop_longer(data.splits[name], config.model.max_positions, name)
            if not len(data.splits[name]):
                del data.splits[name]  # nothing fits: no validation rather than a crash
    return data


def train_batch_plans(config: Config, data) -> list[tuple[np.ndarray, np.ndarray]]:
    """The batches (`batching.batch_plan`) of the train split, or of each of its sampled copies
    (data.subword_sampling), kept in its cache folder and memory-mapped."""
    from transformer.data.batching import batch_plan

    cfg = config.train
    copies = data.segmentations or [data.splits["train"]]
    folders = [
        data.cache_paths.get(f"train_sampled_{k}" if data.segmentations else "train") for k in range(len(copies))
    ]
    return [
        batch_plan(
            folder,
            split.src_lengths,
            split.tgt_lengths,
            max_tokens=cfg.max_tokens,
            seed=cfg.seed,
            buckets=cfg.length_buckets,
        )
        for folder, split in zip(folders, copies)
    ]


def make_sampler(config: Config, data, rank: int, world: int) -> tuple[Any, int]:
    """The train split's token-bucketed sampler (one per sampled copy under data.subword_sampling, moved as one)
    and the micro-batches per update (train.update_tokens)."""
    from transformer.data.batching import TokenBatchSampler
    from transformer.data.subword_sampling import SegmentedBatchSampler

    cfg, copies = config.train, data.segmentations or [data.splits["train"]]
    samplers = [
        TokenBatchSampler(
            split.src_lengths,
            split.tgt_lengths,
            max_tokens=cfg.max_tokens,
            seed=cfg.seed,
            rank=rank,
            world_size=world,
            buckets=cfg.length_buckets,
            plan=plan,
        )
        for split, plan in zip(copies, train_batch_plans(config, data))
    ]
    sampling = config.data.subword_sampling
    setting = sampling and f"alpha={sampling.alpha:g} segmentations={sampling.segmentations}"
    sampler = SegmentedBatchSampler(samplers, setting) if data.segmentations else samplers[0]
    mean_tokens = float(np.sum(copies[0].tgt_lengths)) / max(len(samplers[0]) * world, 1)
    accumulation = cfg.accumulation or optim.micro_batch_count(cfg.update_tokens, mean_tokens, world)
    too_big = optim.update_size_warning(cfg.update_tokens, cfg.max_tokens, mean_tokens, world, accumulation)
    if too_big and rank == 0:
        log.warning(too_big)
    return sampler, accumulation


def load_checked_weights(model, tokenizer, path: Path) -> dict[str, Any]:
    """Load a checkpoint's weights into `model` after checking that its tokenizer gives every id the same piece as
    `tokenizer` (equal sizes are not enough); returns the checkpoint."""
    from transformer.checkpoint import check_vocabulary
    from transformer.data.tokenizer import Tokenizer

    state = load_checkpoint(path, map_location="cpu")
    check_vocabulary(state, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    if not same_pieces(Tokenizer.from_bytes(state["tokenizer"]), tokenizer):
        raise UserError(
            f"{path} was trained with another tokenizer (its pieces differ from the run's, though the "
            "sizes agree); train from it with its own: train.init_from or --resume"
        )
    load_weights(model, state["model"], str(path))
    return state


def init_from(run: RunSetup, path: Path, with_optimizer: bool) -> dict[str, Any] | None:
    """Fine-tuning: the parent's weights; with_optimizer (train.init_optimizer) also its optimizer state and update
    count, so its schedule goes on (train.max_steps then counts from the parent's updates). Returns what
    `Trainer` starts from (None: update 0)."""
    state = load_checked_weights(run.model, run.data.tokenizer, path)
    if not with_optimizer:
        return None
    if "optimizer" not in state:
        raise UserError(
            f"train.init_optimizer: {path} holds no optimizer state (an average or best.pt); use a "
            "numbered checkpoint or checkpoint_last.pt, or set train.init_optimizer: false"
        )
    run.optimizer.load_state_dict(state["optimizer"])
    log.info("fine-tuning from %s with its optimizer state, at update %d", path, state["step"])
    return {"step": state["step"], "progress": {"best": None, "bad_validations": 0, "elapsed": 0.0}}


def fine_tuning_config(path: str | None, overrides: list[str], config: Config) -> Config:
    """Under train.init_from (not resuming), the model section defaults to the parent's (the file's own model keys,
    e.g. dropout, still apply), so an imported model's settings need not be copied by hand."""
    from transformer.config import from_dict, load_config

    if not config.train.init_from:
        return config
    parent = load_checkpoint(config.train.init_from, mmap=True)["config"]
    return load_config(path, overrides, base=from_dict({"model": parent.get("model", {})}))


def resume_from(path: Path, run: RunSetup) -> dict[str, Any]:
    """Restore weights, optimizer, scaler, sampler and every rank's RNG; returns {"step", "progress"}."""
    from transformer.checkpoint import require_training_state

    state = load_checked_weights(run.model, run.data.tokenizer, path)
    require_training_state(state, path)
    run.optimizer.load_state_dict(state["optimizer"])
    if run.scaler is not None and state.get("scaler"):
        run.scaler.load_state_dict(state["scaler"])
    run.sampler.load_state_dict(state["sampler"])
    restore_rng_states(state, run.rank, run.world)
    log.info("resumed from %s at update %d (epoch %d)", path, state["step"], run.sampler.epoch)
    return {"step": state["step"], "progress": state["progress"]}


def describe(run: RunSetup, cfg) -> str:
    """The model's size, the devices, the precision and the update's make-up, for the log."""
    return (
        f"{sum(p.numel() for p in run.model.parameters()):,} parameters on {run.device} x{run.world}"
        f"{' (DDP)' if isinstance(run.net, torch.nn.parallel.DistributedDataParallel) else ''} "
        f"({run.precision}), {run.accumulation} micro-batches of <= {cfg.max_tokens} tokens per update per device"
    )


def training_state(run: RunSetup, config: Config, *, step: int, sampler: dict, progress: dict) -> dict[str, Any]:
    """A checkpoint with the full training state, what `resume_from` restores. A collective: every rank calls it
    (each rank's RNG states are gathered)."""
    rng = rng_states(run.world)
    return model_state(
        run.model,
        config,
        run.data.tokenizer,
        step=step,
        epoch=sampler["epoch"],
        optimizer=run.optimizer.state_dict(),
        scaler=run.scaler.state_dict() if run.scaler else None,
        sampler=sampler,
        rng=rng[0],
        rng_ranks=rng,
        progress=progress,
    )


def build_run(config: Config, *, resume: bool | str = False, progress: bool = True) -> RunSetup:
    """Set up the process, the data and the components; resume (True: train.out_dir/checkpoint_last.pt, or a
    path) or warm-start from train.init_from; then compile and wrap in DDP as configured."""
    from transformer.data.tokenizer import PAD_ID
    from transformer.model.transformer import Transformer

    cfg = config.train
    rank, world, device, precision = setup_process(config)
    data = prepare_run_data(config, world, rank == 0, progress and rank == 0, resume)
    sampler, accumulation = make_sampler(config, data, rank, world)
    model = Transformer.from_config(
        config.model,
        src_vocab_size=data.tokenizer.src_vocab_size,
        tgt_vocab_size=data.tokenizer.tgt_vocab_size,
        pad_id=PAD_ID,
    ).to(device)
    optimizer = optim.make_optimizer(model, cfg)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    run = RunSetup(rank, world, device, precision, data, sampler, accumulation, model, optimizer, scaler, model, None)
    if resume:
        run.restored = resume_from(Path(cfg.out_dir) / "checkpoint_last.pt" if resume is True else Path(resume), run)
    elif cfg.init_from:
        run.restored = init_from(run, Path(cfg.init_from), cfg.init_optimizer)
    if cfg.compile:
        run.net = torch.compile(run.net)
    if torch.distributed.is_initialized():  # under torchrun, even with one process
        ids = [device.index] if device.type == "cuda" else None
        run.net = torch.nn.parallel.DistributedDataParallel(run.net, device_ids=ids)
    return run
