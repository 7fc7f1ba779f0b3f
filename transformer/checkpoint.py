"""Checkpoints: atomic writes, safe loads, rotation of numbered checkpoints, averaging, and loading a model for
inference.

A checkpoint is a plain dict of tensors, numbers, strings and bytes, so `torch.load(weights_only=True)` reads it
and a checkpoint from a stranger cannot run code:

    model       state dict of the uncompiled module
    config      the full resolved config as a nested dict
    tokenizer   {"src": SentencePiece model bytes, "tgt": bytes or None when the vocabulary is joint}
    vocab       {"src": size, "tgt": size}
    step, epoch, optimizer, scaler, sampler, rng, rng_ranks, progress   (training state, written by
                training.setup.training_state; absent in averages. The learning rate is a function of `step`, so no
                scheduler state; `progress` holds best, bad_validations, elapsed and skipped)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from transformer.config import Config, from_dict
from transformer.errors import UserError
from transformer.fileio import atomic_output


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Write atomically (`fileio.atomic_output`): a temporary file in the same folder, fsync, then rename.

    A crash at any moment leaves either the old file or the new one, never a torn one. A full disk or a read-only
    folder is a `UserError` and leaves the old file in place.
    """
    try:
        with atomic_output(path, "wb") as f:
            torch.save(state, f)
    except RuntimeError as exc:  # torch's zip writer reports a failed write as "unexpected pos ..." or similar
        if "unexpected pos" not in str(exc) and "PytorchStreamWriter" not in str(exc):
            raise
        raise UserError(
            f"cannot write {path}: the write failed, most likely the disk is full ({str(exc)[:80]}); "
            "free some space or write somewhere else"
        ) from None


def numbered_checkpoints(run_dir: str | Path) -> list[Path]:
    """A run directory's checkpoint_<step>.pt files, oldest (lowest step) first."""
    found = Path(run_dir).glob("checkpoint_[0-9]*.pt")
    return sorted(found, key=lambda p: int(p.stem.split("_")[1]))


def save_rotating(state: dict[str, Any], run_dir: str | Path, *, step: int, keep_last: int) -> Path:
    """checkpoint_<step>.pt (atomic), checkpoint_last.pt linked to it, and only the last `keep_last` numbered ones
    kept. Returns the numbered path."""
    run_dir = Path(run_dir)
    path = run_dir / f"checkpoint_{step}.pt"
    save_checkpoint(state, path)
    tmp = run_dir / ".checkpoint_last.pt.link"
    tmp.unlink(missing_ok=True)
    os.link(path, tmp)
    os.replace(tmp, run_dir / "checkpoint_last.pt")  # atomic: checkpoint_last.pt is always a whole checkpoint
    for old in numbered_checkpoints(run_dir)[:-keep_last]:
        old.unlink()
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu", mmap: bool = False) -> dict[str, Any]:
    """Read a checkpoint with `weights_only=True`; a missing or unreadable file is a `UserError`.

    mmap: map the file instead of reading it, so tensors that are never touched (optimizer state) cost no memory.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as exc:  # torch raises several types for truncated, foreign or unsafe files
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path} is not a readable checkpoint ({first[:200]})") from None
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise UserError(f"{path} is not a checkpoint written by this project (no model/config inside)")
    return state


def build_model(state: dict[str, Any], device: str | torch.device = "cpu"):
    """The model, tokenizer and config stored in a loaded checkpoint, on `device`, in eval mode."""
    from transformer.data.tokenizer import PAD_ID, Tokenizer
    from transformer.model.transformer import (
        Transformer,  # torch-heavy imports stay local to the callers that need them
    )

    config = from_dict(state["config"])
    tokenizer = Tokenizer.from_bytes(state["tokenizer"])
    check_vocabulary(state, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    model = Transformer.from_config(
        config.model,
        src_vocab_size=tokenizer.src_vocab_size,
        tgt_vocab_size=tokenizer.tgt_vocab_size,
        pad_id=PAD_ID,
    )
    load_weights(model, state["model"], "the checkpoint")
    return model.to(device).eval(), tokenizer, config


def load_for_inference(path: str | Path, device: str | torch.device = "cpu"):
    """(model, tokenizer, config) from a checkpoint file: everything translation needs."""
    return build_model(load_checkpoint(path), device)


def check_vocabulary(state: dict[str, Any], src_vocab_size: int, tgt_vocab_size: int) -> None:
    """Refuse a checkpoint whose embedding sizes do not match the vocabulary it is used with."""
    vocab = state.get("vocab", {})
    if (vocab.get("src"), vocab.get("tgt")) != (src_vocab_size, tgt_vocab_size):
        raise UserError(
            f"checkpoint vocabulary ({vocab.get('src')}/{vocab.get('tgt')} entries) does not match the tokenizer "
            f"({src_vocab_size}/{tgt_vocab_size}); use the checkpoint with the data and tokenizer it was trained on"
        )


def model_state(model: torch.nn.Module, config: Config, tokenizer, **extra: Any) -> dict[str, Any]:
    """The inference part of a checkpoint: weights of the uncompiled module, config, tokenizer, vocabulary."""
    model = getattr(model, "_orig_mod", model)  # torch.compile wrapper
    model = getattr(model, "module", model)  # DistributedDataParallel wrapper
    return {
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "config": config.to_dict(),
        "tokenizer": tokenizer.to_bytes(),
        "vocab": {"src": tokenizer.src_vocab_size, "tgt": tokenizer.tgt_vocab_size},
        **extra,
    }


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], source: str) -> None:
    """`model.load_state_dict(weights)`, with a one-line `UserError` naming the mismatching sizes instead of torch's
    multi-line RuntimeError (a checkpoint from another architecture, or a config that contradicts the weights)."""
    expected = model.state_dict()
    missing, unexpected = sorted(expected.keys() - weights.keys()), sorted(weights.keys() - expected.keys())
    differ = [k for k in expected.keys() & weights.keys() if expected[k].shape != weights[k].shape]
    if not (missing or unexpected or differ):
        model.load_state_dict(weights)
        return
    problems = [f"{k} is {_size(weights[k])} there but {_size(expected[k])} in the model" for k in sorted(differ)]
    problems += [f"{k} is missing there" for k in missing] + [f"{k} is not in the model" for k in unexpected]
    more = f" (and {len(problems) - 2} more)" if len(problems) > 2 else ""
    raise UserError(
        f"{source} does not fit the model: {'; '.join(problems[:2])}{more}; use the model settings it was trained "
        "with (they are stored in the checkpoint: leave the model section unchanged)"
    )


def _size(tensor: torch.Tensor) -> str:
    return "x".join(map(str, tensor.shape)) or "a scalar"


def require_training_state(state: dict[str, Any], path: str | Path) -> None:
    """Refuse to resume from a checkpoint without optimizer state (an average or best.pt)."""
    missing = [k for k in ("optimizer", "sampler", "rng", "step", "progress") if k not in state]
    if missing:
        raise UserError(
            f"{path} holds no training state (no {', '.join(missing)}: it is an averaged or best checkpoint, weights "
            f"only), so a run cannot resume from it; to start a new run from its weights use --set "
            f"train.init_from={path}"
        )


def average_checkpoints(paths: list[str | Path]) -> dict[str, Any]:
    """Element-wise mean of the model weights of several checkpoints (the paper averaged the last 5 or 20).

    The checkpoints are read one at a time (memory-mapped, so their optimizer state is never loaded) and summed
    in float64: memory holds the float64 sum and one checkpoint's weights, whatever the number of checkpoints.
    The result keeps the first checkpoint's config and tokenizer and drops the training state.
    """
    if not paths:
        raise UserError("no checkpoints to average: pass one or more with --inputs")
    first = load_checkpoint(paths[0], mmap=True)
    weights = first["model"]
    totals = {k: v.to(torch.float64, copy=True) if v.is_floating_point() else v.clone() for k, v in weights.items()}
    out = {k: first[k] for k in ("config", "tokenizer", "vocab") if k in first}
    dtypes = {k: v.dtype for k, v in weights.items()}
    del first, weights
    for path in paths[1:]:
        state = load_checkpoint(path, mmap=True)
        weights = state["model"]
        differ = [k for k in totals if k in weights and weights[k].shape != totals[k].shape]
        if weights.keys() != totals.keys() or state.get("vocab") != out.get("vocab") or differ:
            detail = (
                (f": {differ[0]} is {_size(weights[differ[0]])} there but {_size(totals[differ[0]])} in {paths[0]}")
                if differ
                else ""
            )
            raise UserError(f"{path} has a different model or vocabulary than {paths[0]}{detail}; cannot average them")
        for key, total in totals.items():
            if total.is_floating_point():
                total += weights[key].double()
        del state, weights
    averaged = {k: (v / len(paths)).to(dtypes[k]) if v.is_floating_point() else v for k, v in totals.items()}
    return {"model": averaged, **out, "averaged_from": [str(p) for p in paths]}
