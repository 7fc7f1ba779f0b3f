"""The training driver end to end on CPU: checkpoints, exact resume, signals, DDP with gloo, stop conditions."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from transformer.checkpoint import load_checkpoint
from transformer.commands.cli import train_main
from transformer.config import load_config
from transformer.errors import UserError
from transformer.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs/tiny.yaml"


def _args(tmp_path: Path, out: str, *overrides: str) -> list[str]:
    settings = [
        f"train.out_dir={tmp_path / out}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "train.log_every=1",
        "model.dropout=0.1",
        *overrides,
    ]
    return ["--config", str(TINY), "--no-progress", *(a for s in settings for a in ("--set", s))]


def _losses(run: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r and "valid_loss" not in r}


def _run(args: list[str], **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "transformer", "train", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def test_tiny_run_writes_everything(tmp_path):
    assert train_main(_args(tmp_path, "run", "train.max_steps=30", "train.valid_every=15")) == 0
    run = tmp_path / "run"
    names = {p.name for p in run.iterdir()}
    assert {"config.yaml", "metrics.jsonl", "checkpoint_last.pt", "best.pt", "checkpoint_30.pt"} <= names
    assert load_config(run / "config.yaml").train.max_steps == 30
    losses = _losses(run)
    assert len(losses) == 30 and losses[30] < losses[1] - 1.0
    state = load_checkpoint(run / "checkpoint_last.pt")
    assert state["step"] == 30 and {"optimizer", "sampler", "rng", "tokenizer", "config"} <= state.keys()
    valid = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if "valid_loss" in line]
    assert [v["step"] for v in valid] == [15, 30] and all("valid_bleu" in v for v in valid)


def test_validation_lines_never_share_the_progress_bar_line(tmp_path):
    args = [a for a in _args(tmp_path, "bar", "train.max_steps=6", "train.valid_every=3") if a != "--no-progress"]
    out, _ = _run(args).communicate(timeout=300)
    segments = [s for s in out.replace("\r", "\n").split("\n") if "validation at update" in s]
    assert len(segments) == 2 and all(s.startswith("validation at update") for s in segments), out


def test_resume_is_exact(tmp_path):
    """Stop after update 12 (max_steps), resume to 25: the same per-update losses as one run to 25, bitwise. The
    split run prefetches batches (train.prefetch, the default 2) and the full one does not: the checkpoint at 12
    must hold the sampler position of the batches trained, not of those drawn ahead."""
    assert train_main(_args(tmp_path, "full", "train.max_steps=25", "train.prefetch=0")) == 0
    assert train_main(_args(tmp_path, "split", "train.max_steps=12")) == 0
    assert train_main(_args(tmp_path, "split", "train.max_steps=25") + ["--resume"]) == 0
    full, split = _losses(tmp_path / "full"), _losses(tmp_path / "split")
    assert sorted(split) == list(range(1, 26))
    assert split == full
    a = load_checkpoint(tmp_path / "full/checkpoint_last.pt")["model"]
    b = load_checkpoint(tmp_path / "split/checkpoint_last.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resuming_a_finished_run_trains_no_further(tmp_path, cache, monkeypatch):
    """A run that reached max_steps, resumed with the same max_steps: no update, the step stays."""
    assert Trainer(_config(tmp_path, cache, "train.max_steps=3"), progress=False).run()["step"] == 3
    calls = _fake_updates(monkeypatch, lambda n: (False, False))
    result = Trainer(_config(tmp_path, cache, "train.max_steps=3"), resume=True, progress=False).run()
    assert calls == [] and result["step"] == 3 and result["reason"] == "max_steps"
    assert load_checkpoint(tmp_path / "run/checkpoint_last.pt")["step"] == 3


@pytest.mark.slow
def test_sigterm_saves_and_resume_is_exact(tmp_path):
    """A run killed with SIGTERM at an arbitrary update saves; resuming reproduces the uninterrupted losses."""
    assert train_main(_args(tmp_path, "full", "train.max_steps=300", "train.valid_every=0")) == 0
    proc = _run(_args(tmp_path, "killed", "train.max_steps=300", "train.valid_every=0"))
    for line in proc.stdout:
        if "update 20 " in line:
            break
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    stopped_at = load_checkpoint(tmp_path / "killed/checkpoint_last.pt")["step"]
    assert 20 <= stopped_at < 300, out
    resumed = _run(_args(tmp_path, "killed", "train.max_steps=300", "train.valid_every=0") + ["--resume"])
    assert resumed.wait(timeout=300) == 0
    assert _losses(tmp_path / "killed") == _losses(tmp_path / "full")


def test_stops_on_max_time_and_epochs(tmp_path):
    assert train_main(_args(tmp_path, "epochs", "train.max_steps=0", "train.max_epochs=2")) == 0
    state = load_checkpoint(tmp_path / "epochs/checkpoint_last.pt")
    assert state["epoch"] == 2
    config = load_config(
        TINY,
        [
            "train.max_steps=0",
            "train.max_time=2s",
            f"train.out_dir={tmp_path / 'time'}",
            f"data.cache_dir={tmp_path / 'cache'}",
            "train.valid_every=0",
        ],
    )
    result = Trainer(config, progress=False).run()
    assert result["reason"] == "max_time" and 2.0 <= result["elapsed"] < 30


def test_nan_loss_aborts_with_a_message(tmp_path, capsys, monkeypatch):
    """The loss turns NaN from the third micro-batch on (the real forward pass, its value poisoned): with
    nan_patience 2 the run stops on the second non-finite update in a row, with one line and exit code 2."""
    from transformer.training import optim

    real, calls = optim.batch_loss, []

    def poisoned(*args, **kwargs):
        calls.append(1)
        loss, nll = real(*args, **kwargs)
        return (loss * float("nan"), nll) if len(calls) > 2 else (loss, nll)

    monkeypatch.setattr(optim, "batch_loss", poisoned)
    code = train_main(_args(tmp_path, "nan", "train.max_steps=30", "train.nan_patience=2"))
    err = capsys.readouterr().err
    assert code == 2 and "were not finite for 2 updates in a row" in err
    assert len(calls) < 30  # it stopped early, not at max_steps


def test_bad_config_is_one_line_exit_2(tmp_path, capsys):
    assert train_main(["--config", str(TINY), "--set", "model.d_modle=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown config key 'model.d_modle'") and "\n" not in err
    assert train_main(["--config", str(tmp_path / "missing.yaml")]) == 2


def test_resume_keeps_the_checkpoints_tokenizer(tmp_path):
    assert train_main(_args(tmp_path, "run", "train.max_steps=2")) == 0
    before = load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")["tokenizer"]
    assert train_main(_args(tmp_path, "run", "train.max_steps=4", "data.vocab_size=200") + ["--resume"]) == 0
    after = load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")
    assert after["step"] == 4 and after["tokenizer"] == before and after["vocab"]["src"] == 300


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


def test_early_stopping_on_patience(tmp_path, monkeypatch):
    """Validation that never improves stops the run after `patience` validations; best.pt is the first one."""
    from transformer.training import validation

    monkeypatch.setattr(validation, "validate", lambda *args, **kwargs: {"valid_loss": 5.0, "valid_bleu": 1.0})
    settings = ["train.max_steps=100", "train.valid_every=2", "train.patience=2", f"train.out_dir={tmp_path / 'run'}"]
    config = load_config(TINY, [*settings, f"data.cache_dir={tmp_path / 'cache'}"])
    result = Trainer(config, progress=False).run()
    assert result["reason"] == "patience" and result["step"] == 6
    assert load_checkpoint(tmp_path / "run/best.pt")["step"] == 2


# ---------------------------------------------------------------------------------- training-loop defects


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


def _config(tmp_path: Path, cache: Path, *overrides: str):
    settings = [f"train.out_dir={tmp_path / 'run'}", f"data.cache_dir={cache}", "train.valid_every=0", *overrides]
    return load_config(TINY, settings)


def _fake_updates(monkeypatch, outcomes, on_device: bool = False):
    """Replace the update with one that records its learning rate and returns `outcomes(call number)`, as host
    values or (on_device) as tensors, which is how `train_update` reports when it decides skips on the device."""
    from transformer.training import optim

    calls = []

    def update(net, micro, optimizer, *, lr, **kwargs):
        calls.append(lr)
        skipped, nonfinite = outcomes(len(calls))
        if on_device:
            loss, skipped, nonfinite = (
                torch.tensor(1.0, dtype=torch.float64),
                torch.tensor(skipped),
                torch.tensor(nonfinite),
            )
            return optim.UpdateStats(loss, loss, 10, torch.tensor(1.0), skipped, nonfinite)
        return optim.UpdateStats(1.0, 1.0, 10, 1.0, skipped, nonfinite)

    monkeypatch.setattr(optim, "train_update", update)
    return calls


def test_skipped_updates_do_not_advance_the_schedule_or_max_steps(tmp_path, cache, monkeypatch):
    """Updates 2 and 3 are skipped (an fp16 overflow): they keep update 2's rate and do not count toward max_steps."""
    from transformer.training import optim

    calls = _fake_updates(monkeypatch, lambda n: (n in (2, 3), False))
    config = _config(tmp_path, cache, "train.max_steps=4", "train.save_every=0")
    result = Trainer(config, progress=False).run()
    assert calls == [optim.learning_rate(s, config.train, config.model) for s in (1, 2, 2, 2, 3, 4)]
    assert result["step"] == 4 and result["skipped"] == 2
    state = load_checkpoint(tmp_path / "run/checkpoint_last.pt")
    assert state["step"] == 4 and state["progress"]["skipped"] == 2


def test_nan_patience_counts_non_finite_gradients(tmp_path, cache, monkeypatch, capsys):
    _fake_updates(monkeypatch, lambda n: (True, n > 1))  # an overflow, then non-finite gradients
    code = train_main(_args(tmp_path, "run", f"data.cache_dir={cache}", "train.nan_patience=3", "train.valid_every=0"))
    err = capsys.readouterr().err
    assert code == 2 and "were not finite for 3 updates in a row (after update 0)" in err, err
    assert not (tmp_path / "run/train.lock").exists()  # the lock is released on the way out


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this platform")
def test_a_full_disk_while_saving_keeps_the_last_good_checkpoint(tmp_path, cache, monkeypatch, capsys):
    """The checkpoint of update 4 meets a full disk (torch's real error from /dev/full): one line, exit 2, and
    checkpoint_last.pt is still update 2's, whole."""
    real_save = torch.save

    def save(obj, f):
        if obj.get("step") == 4:
            with open("/dev/full", "wb") as full:
                real_save(obj, full)
        real_save(obj, f)

    monkeypatch.setattr(torch, "save", save)
    args = _args(
        tmp_path, "run", f"data.cache_dir={cache}", "train.max_steps=6", "train.save_every=2", "train.valid_every=0"
    )
    code = train_main(args)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: cannot write") and "disk is full" in err and "\n" not in err, err
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "run/checkpoint_last.pt")["step"] == 2
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.endswith(".tmp") or p.name == "train.lock"]


def test_init_from_starts_a_new_run_from_weights_only(tmp_path, cache):
    from transformer.checkpoint import average_checkpoints, save_checkpoint

    Trainer(_config(tmp_path, cache, "train.max_steps=2"), progress=False).run()
    save_checkpoint(average_checkpoints([tmp_path / "run/checkpoint_last.pt"]), tmp_path / "avg.pt")
    config = _config(tmp_path / "new", cache, f"train.init_from={tmp_path / 'avg.pt'}")
    trainer = Trainer(config, progress=False)
    averaged = load_checkpoint(tmp_path / "avg.pt")["model"]
    assert trainer.step == 0 and not trainer.optimizer.state
    assert all(torch.equal(v, averaged[k]) for k, v in trainer.model.state_dict().items())


def test_evaluation_pairs_longer_than_max_positions_are_left_out(tmp_path, cache, caplog):
    """Some verses of the valid split exceed 100 tokens: validation leaves them out (counted) instead of crashing."""
    config = _config(
        tmp_path,
        cache,
        "model.max_positions=100",
        "data.max_tokens_per_sentence=100",
        "train.max_steps=1",
        "train.valid_bleu=false",
    )
    with caplog.at_level("WARNING"):
        trainer = Trainer(config, progress=False)
    match = re.search(r"valid: left out (\d+) of 40 pairs longer than model.max_positions \(100 tokens\)", caplog.text)
    assert match and int(match[1]) > 0, caplog.text
    assert len(trainer.data.splits["valid"]) == 40 - int(match[1])
    assert (
        trainer.data.splits["valid"].src_lengths.max() <= 100 and trainer.data.splits["valid"].tgt_lengths.max() <= 100
    )
    assert trainer.run()["step"] == 1


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


def test_curves_at_each_validation_and_tensorboard(tmp_path, monkeypatch):
    """curves.png is rewritten at every validation (and at the end), titled with the run; metrics reach TensorBoard."""
    pytest.importorskip("tensorboard")
    import transformer.training.plotting as plotting

    calls = []
    real = plotting.plot_curves
    monkeypatch.setattr(plotting, "plot_curves", lambda *a, **k: calls.append(k.get("title")) or real(*a, **k))
    args = _args(
        tmp_path,
        "tb",
        "train.max_steps=6",
        "train.valid_every=2",
        "train.valid_bleu_sentences=4",
        "train.tensorboard=true",
    )
    assert train_main(args) == 0
    assert calls == ["run tb"] * 4  # validations at 2, 4 and 6, then the end of the run
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tb" / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/lr", "valid/loss", "valid/bleu"} <= tags
    assert [e.step for e in events.Scalars("valid/loss")] == [2, 4, 6]
    losses = [json.loads(line) for line in (tmp_path / "tb" / "metrics.jsonl").read_text().splitlines()]
    assert [e.value for e in events.Scalars("train/loss")] == pytest.approx([r["loss"] for r in losses if "lr" in r])


def test_print_config_prints_the_resolved_config(tmp_path, capsys):
    import yaml

    assert train_main(["--config", str(TINY), "--set", "train.lr=1e-3", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["train"]["lr"] == 1e-3
    assert printed["data"]["train"]["tsv"] == str(ROOT / "data/bible-es-en/dev.tsv.xz")  # against configs/


# ---------------------------------------------------------------- prefetching, no host read per update


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "batch-prefetch" and t.is_alive()]


@pytest.mark.parametrize("depth", [1, 3])
def test_prefetching_keeps_the_batch_order_and_records_the_trained_position(tmp_path, cache, monkeypatch, depth):
    """The same micro-batches in the same order with and without the prefetch thread; the checkpoint holds the
    sampler position after the 10 batches trained (5 updates x 2), not after those drawn ahead; no thread is left."""
    from transformer.training import optim

    def run(prefetch: int, out: str):
        seen = []

        def update(net, micro, optimizer, *, lr, **kwargs):
            seen.append([b.indices for b in micro])
            return optim.UpdateStats(1.0, 1.0, 10, 1.0, False, False)

        monkeypatch.setattr(optim, "train_update", update)
        config = _config(
            tmp_path / out, cache, "train.max_steps=5", "train.accumulation=2", f"train.prefetch={prefetch}"
        )
        trainer = Trainer(config, progress=False)
        trainer.run()
        return seen, load_checkpoint(tmp_path / out / "run/checkpoint_last.pt")["sampler"], len(trainer.sampler)

    plain, plain_state, per_epoch = run(0, "plain")
    ahead, ahead_state, _ = run(depth, "ahead")
    assert ahead == plain and len(plain) == 5
    assert plain_state == ahead_state and per_epoch > 10 and ahead_state["position"] == 10
    assert not _prefetch_threads()


def test_no_prefetch_thread_outlives_a_failed_run(tmp_path, cache, monkeypatch):
    _fake_updates(monkeypatch, lambda n: (True, True))
    with pytest.raises(UserError, match="not finite for 5 updates in a row"):
        Trainer(_config(tmp_path, cache, "train.prefetch=4"), progress=False).run()
    assert not _prefetch_threads()
    from transformer.training.prefetch import Prefetcher

    def failing():
        yield "tag", None
        raise OSError("the corpus file vanished")

    with Prefetcher(failing(), torch.device("cpu"), depth=2) as batches:
        assert next(batches) == ("tag", None)  # what came before the error, then the error, in the consumer
        with pytest.raises(OSError, match="vanished"):
            next(batches)
    assert not _prefetch_threads()


@pytest.mark.parametrize(("log_every", "rates"), [(1, (1, 2, 2, 2, 3, 4)), (10, (1, 2, 3, 4, 3, 4))])
def test_device_decided_skips_are_read_where_the_count_matters(tmp_path, cache, monkeypatch, log_every, rates):
    """Updates 2 and 3 skipped, reported as device tensors. Read at every log line (log_every 1): the schedule of
    the synced path. Read only at max_steps (4 counted updates): the rate runs ahead by the skips until then, as the
    docs say; the update count, the checkpoint and the skip count are exact either way."""
    from transformer.training import optim

    calls = _fake_updates(monkeypatch, lambda n: (n in (2, 3), n in (2, 3)), on_device=True)
    config = _config(tmp_path, cache, "train.max_steps=4", "train.save_every=0", f"train.log_every={log_every}")
    result = Trainer(config, progress=False).run()
    assert calls == [optim.learning_rate(s, config.train, config.model) for s in rates]
    assert result["step"] == 4 and result["skipped"] == 2
    state = load_checkpoint(tmp_path / "run/checkpoint_last.pt")
    assert state["step"] == 4 and state["progress"]["skipped"] == 2


def test_device_decided_nan_patience_aborts_at_the_next_log_line(tmp_path, cache, monkeypatch, capsys):
    """Non-finite from update 2 on, patience 3, read every 4 updates: the abort comes at the read after update 4
    (3 in a row by then), and names the run of non-finite updates it found."""
    calls = _fake_updates(monkeypatch, lambda n: (n > 1, n > 1), on_device=True)
    code = train_main(
        _args(
            tmp_path,
            "run",
            f"data.cache_dir={cache}",
            "train.nan_patience=3",
            "train.valid_every=0",
            "train.log_every=4",
        )
    )
    err = capsys.readouterr().err
    assert code == 2 and "were not finite for 3 updates in a row (after update 1)" in err, err
    assert len(calls) == 4 and not _prefetch_threads()


def test_a_run_deciding_skips_on_the_device_equals_the_synced_run(tmp_path, cache, monkeypatch):
    """make_optimizer's CUDA optimizer (fused Adam) on the CPU, with dropout: the device path (no host read per
    update) and the synced path give the same logged losses and the same weights, bit for bit."""
    from transformer.training import optim

    def fused(model, train):
        return torch.optim.Adam(model.parameters(), lr=0.0, betas=train.adam_betas, eps=train.adam_eps, fused=True)

    try:
        fused(torch.nn.Linear(1, 1), load_config(TINY).train)
    except (RuntimeError, TypeError) as exc:
        pytest.skip(f"no fused Adam on the CPU in this torch: {exc}")
    monkeypatch.setattr(optim, "make_optimizer", fused)
    common = ["train.max_steps=6", "train.log_every=2"]
    assert train_main(_args(tmp_path, "device", f"data.cache_dir={cache}", *common)) == 0
    monkeypatch.setattr(optim, "skips_on_device", lambda *args: False)
    assert train_main(_args(tmp_path, "synced", f"data.cache_dir={cache}", *common)) == 0
    device, synced = _losses(tmp_path / "device"), _losses(tmp_path / "synced")
    assert sorted(device) == [2, 4, 6] and device == synced
    a = load_checkpoint(tmp_path / "device/checkpoint_last.pt")["model"]
    b = load_checkpoint(tmp_path / "synced/checkpoint_last.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
