"""Processes and random streams for training: the DDP group, agreement between ranks, and per-rank RNG states.

One process per device; under `torchrun` the processes form a DDP group. Each rank draws its own random numbers
(dropout), so a checkpoint stores every rank's generator states and a resumed run gives each rank its own back.
"""

from __future__ import annotations

import datetime
import io
import logging
import os
import random
from typing import Any

import numpy as np
import torch

from transformer.devices import avoid_cudnn_attention
from transformer.errors import UserError

log = logging.getLogger(__name__)


def init_distributed() -> tuple[int, int, torch.device]:
    """(rank, world size, device) from torchrun's environment; a single process when it is absent. Started by
    torchrun, even with one process, the process joins a group and the model is wrapped in DDP (training/setup.py),
    so `torchrun --nproc_per_node 1` runs the same code path as 8 GPUs."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            raise UserError(
                f"process {local_rank} has no GPU: {torch.cuda.device_count()} visible; start at most that many "
                "processes per node (torchrun --nproc_per_node), or set CUDA_VISIBLE_DEVICES= to train on the CPU"
            )
        avoid_cudnn_attention()
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if "WORLD_SIZE" in os.environ and not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    return rank, world, device


def barrier(group=None) -> None:
    if torch.distributed.is_initialized():
        torch.distributed.barrier(group=group)


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank when `flag` is true on any rank (stop decisions must agree)."""
    if not torch.distributed.is_initialized():
        return flag
    tensor = torch.tensor([float(flag)], device=device)
    torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
    return bool(tensor.item())


# ----------------------------------------------------------------------------------------- RNG states


def rng_state() -> dict[str, Any]:
    """Python, NumPy, torch and CUDA generator states as tensors and plain values (weights_only-safe)."""
    np_state = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [np_state[0], torch.from_numpy(np_state[1].copy()), *np_state[2:]],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(tuple(v if not isinstance(v, list) else tuple(v) for v in state["python"]))
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy(), *rest))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def prepare_group(timeout_seconds: float):
    """A gloo group whose barrier waits up to `timeout_seconds`, for the ranks that wait while rank 0 prepares the
    data (training SentencePiece and encoding a corpus can outlast the default process-group timeout)."""
    if not torch.distributed.is_initialized():
        return None
    return torch.distributed.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_seconds))


def rng_states(world: int) -> list[dict[str, Any]]:
    """Every rank's `rng_state()`, in rank order (a collective: every rank must call it)."""
    local = rng_state()
    if world == 1 or not torch.distributed.is_initialized():
        return [local]
    buffer = io.BytesIO()
    torch.save(local, buffer)  # sent as bytes: all_gather_object cannot round-trip tensors on every torch version
    blobs: list[Any] = [None] * world
    torch.distributed.all_gather_object(blobs, buffer.getvalue())
    return [torch.load(io.BytesIO(blob), weights_only=True) for blob in blobs]


def restore_rng_states(checkpoint: dict[str, Any], rank: int, world: int) -> None:
    """This rank's states from a checkpoint; rank 0's (with a warning) when it was saved by another world size."""
    states = checkpoint.get("rng_ranks") or [checkpoint["rng"]]
    if len(states) != world:
        log.warning(
            "the checkpoint holds random states for %d process(es), this run has %d: each process resumes "
            "with rank 0's, so dropout differs from an uninterrupted run",
            len(states),
            world,
        )
        states = [states[0]] * world
    set_rng_state(states[rank])
