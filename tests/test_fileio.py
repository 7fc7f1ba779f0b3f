"""fileio: atomic outputs, outputs that are inputs, the run lock, UTF-8 input, and real file-system faults."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys

import pytest
import torch
from fs_faults import full_dir, killed_write, readonly_dir

from transformer.checkpoint import load_checkpoint, save_checkpoint
from transformer.errors import UserError
from transformer.fileio import (
    Interrupted,
    RunLock,
    atomic_output,
    check_not_an_input,
    os_error,
    remove_stale_temporaries,
    signals_raise,
    utf8_lines,
    write_text,
)


def test_atomic_output_replaces_only_on_success(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_output(path) as f:
        f.write("half of the new")
        raise RuntimeError("failed half way")
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["out.txt"]
    with atomic_output(path) as f:
        f.write("new\n")
    assert path.read_text() == "new\n" and os.listdir(tmp_path) == ["out.txt"]


def test_a_signal_while_writing_keeps_the_old_file(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as info, signals_raise(), atomic_output(path) as f:
        f.write("partial\n")
        os.kill(os.getpid(), signal.SIGTERM)
    assert info.value.code == 128 + signal.SIGTERM
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["out.txt"]
    assert signal.getsignal(signal.SIGTERM) is before  # restored after the block


def test_links_are_followed_and_permissions_kept(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("old\n")
    target.chmod(0o640)
    (tmp_path / "link.txt").symlink_to(target)
    write_text(tmp_path / "link.txt", "new\n")
    assert (tmp_path / "link.txt").is_symlink() and target.read_text() == "new\n"
    assert target.stat().st_mode & 0o777 == 0o640


def test_devices_are_written_directly(tmp_path):
    with atomic_output("/dev/null") as f:  # never renamed over: /dev/null stays a device
        f.write("x")
    assert not os.path.isfile("/dev/null")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this platform")
def test_dev_full_is_a_one_line_error():
    with pytest.raises(UserError, match=r"cannot write /dev/full: the disk is full") as info:
        write_text("/dev/full", "x" * 100_000)
    assert "\n" not in str(info.value)


def test_same_file_through_links(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("a\n")
    (tmp_path / "sym.txt").symlink_to(src)
    os.link(src, tmp_path / "hard.txt")
    for alias in (src, tmp_path / "sym.txt", tmp_path / "hard.txt", tmp_path / "." / "in.txt"):
        with pytest.raises(UserError, match="same file as --input"):
            check_not_an_input(alias, [("--input", src)])
    check_not_an_input(tmp_path / "other.txt", [("--input", src), ("--ref", None)])  # a new file is fine
    check_not_an_input("-", [("--input", "-")])  # stdout is not stdin


def test_os_errors_name_the_path_and_the_fix():
    error = os_error(OSError(errno.ENOSPC, "No space left on device"), "runs/x/checkpoint_4.pt")
    assert str(error).startswith("cannot write runs/x/checkpoint_4.pt: the disk is full")
    assert "errno 28" in str(error)
    assert "read-only" in str(os_error(OSError(errno.EROFS, "Read-only file system"), "a"))


def test_utf8_lines_name_the_bad_line_and_drop_the_bom():
    assert list(utf8_lines([b"\xef\xbb\xbf\n", b"b\r\n"], "f")) == ["", "b"]
    assert list(utf8_lines([b"a\n", b"\xef\xbb\xbfb\n"], "f")) == ["a", "\ufeffb"]  # only at the start of the file
    with pytest.raises(UserError, match="f line 2 is not valid UTF-8"):
        list(utf8_lines([b"a\n", b"caf\xe9\n"], "f"))


def test_run_lock_refuses_a_live_holder_and_takes_over_a_stale_one(tmp_path):
    with RunLock(tmp_path) as lock:
        assert (tmp_path / "train.lock").read_text().split()[0] == str(os.getpid())
        with pytest.raises(UserError, match=f"in use by another training run \\(PID {os.getpid()} "):
            RunLock(tmp_path).acquire()
    assert not (tmp_path / "train.lock").exists() and not lock.held
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its PID is now free (a reuse within this test is practically impossible)
    (tmp_path / "train.lock").write_text(f"{dead.pid} {os.uname().nodename}\n")
    with RunLock(tmp_path):  # kill -9 left this lock: taken over
        assert (tmp_path / "train.lock").read_text().split()[0] == str(os.getpid())


def test_temporary_files_name_their_writer(tmp_path):
    with atomic_output(tmp_path / "out.txt") as f:
        f.write("new\n")
        (temporary,) = [p.name for p in tmp_path.iterdir()]
    assert temporary.startswith(f".out.txt.{os.getpid()}@{socket.gethostname()}.") and temporary.endswith(".tmp")


def test_only_the_temporaries_of_dead_writers_are_removed(tmp_path):
    """A write killed with SIGKILL leaves its temporary file: removed. Kept: one that this live process is writing,
    one from another host (its PID means nothing here), one that names no writer, and everything else."""
    host = socket.gethostname()
    dead, dead_pid = killed_write(tmp_path / "checkpoint_4.pt", size=1234)
    assert dead.name.startswith(f".checkpoint_4.pt.{dead_pid}@{host}.") and dead.stat().st_size == 1234
    kept = [
        f".checkpoint_6.pt.{os.getpid()}@{host}.k2j4h5g6.tmp",
        f".checkpoint_5.pt.{dead_pid}@other-host.a.tmp",
        ".checkpoint_3.pt.ab12cd34.tmp",
        "checkpoint_2.pt",
        "notes.tmp",
    ]
    for name in kept:
        (tmp_path / name).write_bytes(b"y")
    assert remove_stale_temporaries(tmp_path) == [(dead, 1234)]
    assert sorted(os.listdir(tmp_path)) == sorted(kept)
    assert remove_stale_temporaries(tmp_path) == []


def test_read_only_folder(tmp_path):
    with readonly_dir(tmp_path / "ro", {"old.txt": b"old\n"}) as folder:
        with pytest.raises(UserError, match=f"cannot write {folder / 'old.txt'}: "):
            write_text(folder / "old.txt", "new\n")
        with pytest.raises(UserError, match="cannot write"):
            save_checkpoint({"model": {}, "config": {}}, folder / "sub" / "c.pt")
        assert (folder / "old.txt").read_bytes() == b"old\n" and sorted(os.listdir(folder)) == ["old.txt"]


def test_full_disk_keeps_the_previous_checkpoint(tmp_path):
    """A real ENOSPC (or torch's 'unexpected pos') while writing a checkpoint and a text file on a full tmpfs."""
    good = tmp_path / "good.pt"
    save_checkpoint({"model": {"w": torch.zeros(4)}, "config": {}, "step": 1}, good)
    with full_dir(tmp_path / "full", {"c.pt": good.read_bytes(), "out.txt": b"old\n"}) as folder:
        with pytest.raises(UserError, match="disk is full") as info:
            save_checkpoint({"model": {"w": torch.zeros(200_000)}, "config": {}, "step": 2}, folder / "c.pt")
        assert "\n" not in str(info.value)
        assert load_checkpoint(folder / "c.pt")["step"] == 1
        with pytest.raises(UserError, match="the disk is full"):
            write_text(folder / "out.txt", "new\n" * 100_000)
        assert (folder / "out.txt").read_bytes() == b"old\n"
        assert sorted(os.listdir(folder)) == [".filler", "c.pt", "out.txt"]  # no temporary file left
