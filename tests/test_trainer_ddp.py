"""The training driver under torch.distributed on the CPU (gloo): 2 processes equal 1 with the same global batch,
one process under torchrun goes through DDP, each rank gets its own random state back on resume."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_trainer import ROOT, _args, _losses

from transformer.checkpoint import load_checkpoint
from transformer.commands.cli import train_main
from transformer.errors import UserError


@pytest.mark.slow
def test_ddp_two_processes_equal_one_with_the_same_global_batch(tmp_path, monkeypatch):
    """torchrun with 2 gloo processes x 1 micro-batch == 1 process x 2 micro-batches (dropout off), on the CPU."""
    common = ["train.max_steps=6", "train.valid_every=0", "model.dropout=0.0", "train.max_tokens=512"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # both runs on the CPU, also on a GPU machine
    assert train_main(_args(tmp_path, "single", *common, "train.accumulation=2")) == 0
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        "29533",
        "-m",
        "transformer",
        "train",
        *_args(tmp_path, "ddp", *common, "train.accumulation=1"),
    ]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    single, ddp = _losses(tmp_path / "single"), _losses(tmp_path / "ddp")
    assert single.keys() == ddp.keys()
    for step in single:
        assert ddp[step] == pytest.approx(single[step], rel=1e-5)
    a = load_checkpoint(tmp_path / "single/checkpoint_last.pt")["model"]
    b = load_checkpoint(tmp_path / "ddp/checkpoint_last.pt")["model"]
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)


def test_one_process_under_torchrun_trains_through_ddp(tmp_path, monkeypatch, caplog):
    """torchrun's environment with WORLD_SIZE=1: the process joins a (gloo) group and the model is wrapped in DDP,
    the code path of several GPUs; its losses equal a plain run's."""
    import logging
    import socket

    common = ["train.max_steps=3", "train.valid_every=0", "model.dropout=0.0"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert train_main(_args(tmp_path, "plain", *common)) == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, value in {
        "WORLD_SIZE": "1",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }.items():
        monkeypatch.setenv(name, value)
    try:
        caplog.set_level(logging.INFO)
        assert train_main(_args(tmp_path, "ddp", *common)) == 0
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    assert "on cpu x1 (DDP)" in caplog.text  # setup.describe: the net is a DistributedDataParallel
    assert _losses(tmp_path / "ddp") == pytest.approx(_losses(tmp_path / "plain"), rel=1e-6)


def test_more_processes_than_gpus_is_a_clear_error(monkeypatch):
    from transformer.training import distributed

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(UserError, match="process 1 has no GPU: 1 visible"):
        distributed.init_distributed()


def test_each_rank_gets_its_own_random_state_back():
    from transformer.training.distributed import restore_rng_states, rng_state

    torch.manual_seed(1)
    first = rng_state()
    torch.manual_seed(2)
    second = rng_state()
    restore_rng_states({"rng": first, "rng_ranks": [first, second]}, rank=1, world=2)
    assert torch.equal(torch.get_rng_state(), second["torch"])
    restore_rng_states({"rng": first}, rank=0, world=1)  # a checkpoint from before per-rank states
    assert torch.equal(torch.get_rng_state(), first["torch"])


def _torchrun(tmp_path: Path, out: str, port: int, *overrides: str, resume: bool = False) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(port),
        "-m",
        "transformer",
        "train",
        *_args(tmp_path, out, *overrides),
    ]
    cmd += ["--resume"] if resume else []
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.slow
def test_ddp_resume_restores_every_ranks_random_state(tmp_path):
    """2 gloo processes with dropout: 3 updates + resume to 6 == 6 updates, so each rank got its own RNG back."""
    common = ["train.valid_every=0", "train.max_tokens=512", "train.accumulation=1", "train.save_every=0"]
    _torchrun(tmp_path, "full", 29541, *common, "train.max_steps=6")  # the first run also fills the cache
    _torchrun(tmp_path, "split", 29542, *common, "train.max_steps=3")
    state = load_checkpoint(tmp_path / "split/checkpoint_last.pt")
    assert len(state["rng_ranks"]) == 2
    assert not torch.equal(state["rng_ranks"][0]["torch"], state["rng_ranks"][1]["torch"])
    _torchrun(tmp_path, "split", 29543, *common, "train.max_steps=6", resume=True)
    assert _losses(tmp_path / "split") == _losses(tmp_path / "full")
