"""The training loop's updates and their faults, on fake updates where the outcome matters: skipped updates and the
schedule, non-finite gradients and nan_patience, a full disk while saving, a finished run resumed, init_from,
validation pairs over max_positions, the prefetch thread, and skips decided on the device."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest
import torch
from test_trainer import TINY, _args, _losses

from transformer.checkpoint import load_checkpoint
from transformer.commands.cli import train_main
from transformer.config import load_config
from transformer.errors import UserError
from transformer.training.trainer import Trainer


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


def test_resuming_a_finished_run_trains_no_further(tmp_path, cache, monkeypatch):
    """A run that reached max_steps, resumed with the same max_steps: no update, the step stays."""
    assert Trainer(_config(tmp_path, cache, "train.max_steps=3"), progress=False).run()["step"] == 3
    calls = _fake_updates(monkeypatch, lambda n: (False, False))
    result = Trainer(_config(tmp_path, cache, "train.max_steps=3"), resume=True, progress=False).run()
    assert calls == [] and result["step"] == 3 and result["reason"] == "max_steps"
    assert load_checkpoint(tmp_path / "run/checkpoint_last.pt")["step"] == 3


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
