"""Checkpoints: atomic writes survive a crash mid-write, loads are weights_only, averaging is the mean."""

from __future__ import annotations

import os
import pickle

import pytest
import torch
from conftest import tiny_model

from transformer import checkpoint
from transformer.checkpoint import average_checkpoints, load_checkpoint, save_checkpoint
from transformer.errors import UserError


def _state(model, **extra):
    return {"model": model.state_dict(), "config": {}, "vocab": {"src": 23, "tgt": 23}, **extra}


def test_round_trip(tmp_path):
    model = tiny_model()
    save_checkpoint(_state(model, step=3, tokenizer={"src": b"abc", "tgt": None}), tmp_path / "c.pt")
    state = load_checkpoint(tmp_path / "c.pt")
    assert state["step"] == 3 and state["tokenizer"]["src"] == b"abc"
    for k, v in model.state_dict().items():
        torch.testing.assert_close(state["model"][k], v)
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary file left behind


def test_crash_while_writing_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint_last.pt"
    save_checkpoint(_state(tiny_model(), step=1), path)

    def torn_save(obj, f):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt  # the process is interrupted in the middle of the write

    monkeypatch.setattr(checkpoint.torch, "save", torn_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(_state(tiny_model(), step=2), path)
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint_last.pt"]


@pytest.mark.parametrize("where", ["half-written", "before-rename"])
def test_killed_writer_process_leaves_previous_checkpoint(tmp_path, where):
    """A SIGKILL while the new checkpoint is half written, or written but not yet renamed, never tears the file
    readers use. The writer stops at that exact point and waits to be killed, so no timing is involved."""
    import subprocess
    import sys
    import textwrap

    path = tmp_path / "c.pt"
    save_checkpoint({"model": {"w": torch.zeros(3)}, "config": {}, "step": 1}, path)
    code = textwrap.dedent(f"""
        import io, os, sys, torch
        from transformer.checkpoint import save_checkpoint

        def wait_to_be_killed(stage):
            print(stage, flush=True)
            sys.stdin.readline()

        real_save, real_replace = torch.save, os.replace
        def half_save(obj, f):
            buffer = io.BytesIO()
            real_save(obj, buffer)
            f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            f.flush()
            if {where!r} == "half-written":
                wait_to_be_killed("half-written")
            f.write(buffer.getvalue()[len(buffer.getvalue()) // 2 :])
        def replace(src, dst):
            wait_to_be_killed("before-rename")
            real_replace(src, dst)
        torch.save, os.replace = half_save, replace
        save_checkpoint({{"model": {{"w": torch.ones(1000)}}, "config": {{}}, "step": 2}}, {str(path)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == where
    finally:
        proc.kill()
        proc.wait()
    assert load_checkpoint(path)["step"] == 1
    assert len(list(tmp_path.iterdir())) == 2, "the killed write leaves its temporary file beside the checkpoint"


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # a plain pickle, not torch.save
def test_loading_refuses_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        pickle.dump({"model": Evil(), "config": {}}, f)
    with pytest.raises(UserError, match="is not a readable checkpoint"):
        load_checkpoint(path)


def test_missing_and_foreign_files(tmp_path):
    with pytest.raises(UserError, match="checkpoint not found"):
        load_checkpoint(tmp_path / "none.pt")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(UserError, match="not a checkpoint written by this project"):
        load_checkpoint(tmp_path / "other.pt")
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(UserError, match="is not a readable checkpoint"):
        load_checkpoint(tmp_path / "text.pt")


def test_average_is_the_mean(tmp_path):
    a, b = tiny_model(), tiny_model()
    with torch.no_grad():
        for p in b.parameters():
            p.add_(1.0)
    save_checkpoint(_state(a), tmp_path / "a.pt")
    save_checkpoint(_state(b), tmp_path / "b.pt")
    averaged = average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])
    for key, value in a.state_dict().items():
        torch.testing.assert_close(averaged["model"][key], (value + b.state_dict()[key]) / 2)
    assert "optimizer" not in averaged


def test_average_refuses_mismatched_models(tmp_path):
    save_checkpoint(_state(tiny_model()), tmp_path / "a.pt")
    save_checkpoint(_state(tiny_model(n_decoder_layers=1)), tmp_path / "b.pt")
    with pytest.raises(UserError, match="different model or vocabulary"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])


def test_average_cli(tmp_path, capsys):
    from transformer.commands.cli import average_main

    for step in (1, 2, 3):
        save_checkpoint(_state(tiny_model(), step=step), tmp_path / f"checkpoint_{step}.pt")
    assert average_main(["--dir", str(tmp_path), "--last", "2", "--output", str(tmp_path / "avg.pt")]) == 0
    assert load_checkpoint(tmp_path / "avg.pt")["averaged_from"][-1].endswith("checkpoint_3.pt")
    assert average_main(["--dir", str(tmp_path / "empty"), "--output", str(tmp_path / "x.pt")]) == 2
    assert "no numbered checkpoints" in capsys.readouterr().err


def test_average_reads_one_checkpoint_at_a_time_and_sums_in_float64(tmp_path, monkeypatch):
    """No earlier checkpoint is alive when the next is read; float32 sums would lose the 1 next to 1e8 (ulp 8)."""
    import gc
    import weakref

    values = [1e8, 1.0, -1e8]
    paths = []
    for i, value in enumerate(values):
        paths.append(tmp_path / f"c{i}.pt")
        state = {"model": {"w": torch.full((3,), value)}, "config": {}, "vocab": {"src": 5, "tgt": 5}}
        save_checkpoint({**state, "optimizer": {"m": torch.zeros(1000)}}, paths[-1])
    refs, alive = [], []
    real_load = checkpoint.load_checkpoint

    def tracking_load(path, **kwargs):
        gc.collect()
        alive.append(sum(ref() is not None for ref in refs))
        state = real_load(path, **kwargs)
        refs.append(weakref.ref(state["model"]["w"]))
        return state

    monkeypatch.setattr(checkpoint, "load_checkpoint", tracking_load)
    averaged = average_checkpoints(paths)
    assert alive == [0, 0, 0]
    assert averaged["model"]["w"].dtype == torch.float32
    assert torch.equal(averaged["model"]["w"], torch.full((3,), 1 / 3, dtype=torch.float64).float())
    assert "optimizer" not in averaged


def test_average_warns_when_fewer_checkpoints_than_asked(tmp_path, caplog):
    from transformer.commands.cli import average_main

    save_checkpoint(_state(tiny_model(), step=7), tmp_path / "checkpoint_7.pt")
    assert average_main(["--dir", str(tmp_path), "--last", "5", "--output", str(tmp_path / "avg.pt")]) == 0
    assert "--last 5 asked for 5 checkpoints but" in caplog.text and "has only 1" in caplog.text
    caplog.clear()
    save_checkpoint(_state(tiny_model(), step=8), tmp_path / "checkpoint_8.pt")
    assert average_main(["--dir", str(tmp_path), "--last", "2", "--output", str(tmp_path / "avg.pt")]) == 0
    assert "asked for" not in caplog.text


def test_rotation_keeps_the_last_numbered_checkpoints_by_step_and_links_last(tmp_path):
    """Steps 8, 9, 10, 11 with keep_last=2: by number (not by name, where "10" < "8") 10 and 11 stay, and
    checkpoint_last.pt is the same file as checkpoint_11.pt; `numbered_checkpoints` lists them oldest first."""
    for step in (8, 9, 10, 11):
        path = checkpoint.save_rotating({"model": {}, "config": {}, "step": step}, tmp_path, step=step, keep_last=2)
        assert path == tmp_path / f"checkpoint_{step}.pt"
    assert checkpoint.numbered_checkpoints(tmp_path) == [tmp_path / "checkpoint_10.pt", tmp_path / "checkpoint_11.pt"]
    assert os.path.samefile(tmp_path / "checkpoint_last.pt", tmp_path / "checkpoint_11.pt")
    assert load_checkpoint(tmp_path / "checkpoint_last.pt")["step"] == 11
