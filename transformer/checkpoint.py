"""Checkpoints: atomic writes, safe loads, averaging, and loading a model for inference.

A checkpoint is a plain dict of tensors, numbers, strings and bytes, so `torch.load(weights_only=True)` reads it
and a checkpoint from a stranger cannot run code:

    model       state dict of the uncompiled module
    config      the full resolved config as a nested dict
    tokenizer   {"src": SentencePiece model bytes, "tgt": bytes or None when the vocabulary is joint}
    vocab       {"src": size, "tgt": size}
    step, epoch, optimizer, scheduler, scaler, sampler, rng, metrics   (training state; absent in averages)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from transformer.config import Config, from_dict
from transformer.errors import UserError


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Write atomically: a temporary file in the same folder, fsync, then rename over `path`.

    A crash at any moment leaves either the old file or the new one, never a torn one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint with `weights_only=True`; a missing or unreadable file is a `UserError`."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises several types for truncated, foreign or unsafe files
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path} is not a readable checkpoint ({first[:200]})") from None
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise UserError(f"{path} is not a checkpoint written by this project (no model/config inside)")
    return state


def build_model(state: dict[str, Any], device: str | torch.device = "cpu"):
    """The model, tokenizer and config stored in a loaded checkpoint, on `device`, in eval mode."""
    from transformer.model import Transformer  # torch-heavy imports stay local to the callers that need them
    from transformer.tokenizer import PAD_ID, Tokenizer

    config = from_dict(state["config"])
    tokenizer = Tokenizer.from_bytes(state["tokenizer"])
    check_vocabulary(state, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    model = Transformer.from_config(
        config.model,
        src_vocab_size=tokenizer.src_vocab_size,
        tgt_vocab_size=tokenizer.tgt_vocab_size,
        pad_id=PAD_ID,
    )
    model.load_state_dict(state["model"])
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


def average_checkpoints(paths: list[str | Path]) -> dict[str, Any]:
    """Element-wise mean of the model weights of several checkpoints (the paper averaged the last 5 or 20).

    The result keeps the first checkpoint's config and tokenizer and drops the training state.
    """
    if not paths:
        raise UserError("no checkpoints to average: pass one or more with --inputs")
    states = [load_checkpoint(p) for p in paths]
    first = states[0]
    for path, state in zip(paths[1:], states[1:]):
        if state["model"].keys() != first["model"].keys() or state.get("vocab") != first.get("vocab"):
            raise UserError(f"{path} has a different model or vocabulary than {paths[0]}; cannot average them")
    averaged = {}
    for key, value in first["model"].items():
        if value.is_floating_point():
            total = sum(state["model"][key].double() for state in states)
            averaged[key] = (total / len(states)).to(value.dtype)
        else:
            averaged[key] = value.clone()
    out = {k: first[k] for k in ("config", "tokenizer", "vocab") if k in first}
    return {"model": averaged, **out, "averaged_from": [str(p) for p in paths]}
