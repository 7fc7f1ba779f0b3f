"""Real file-system faults for tests: a read-only folder and a full file system, where the platform allows.

Without root, a folder with mode 0555 refuses writes (EACCES). Root ignores modes, so there a read-only tmpfs is
mounted instead (EROFS); a full file system is a tiny tmpfs filled up (ENOSPC). Where mounting is not allowed
(no root, a container without the capability) the test is skipped.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def _tmpfs(path: Path, options: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if result.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def readonly_dir(path: Path, files: dict[str, bytes] | None = None) -> Iterator[Path]:
    """A folder holding `files` that refuses new files and changes."""
    files = files or {}
    if os.geteuid() != 0:
        path.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (path / name).write_bytes(data)
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    with _tmpfs(path, "size=1m") as mounted:
        for name, data in files.items():
            (mounted / name).write_bytes(data)
        subprocess.run(["mount", "-o", "remount,ro", str(mounted)], check=True, capture_output=True)
        yield mounted


@contextlib.contextmanager
def full_dir(path: Path, files: dict[str, bytes] | None = None) -> Iterator[Path]:
    """A folder on a file system with no space left, holding `files` (written before it was filled)."""
    with _tmpfs(path, "size=256k") as mounted:
        for name, data in (files or {}).items():
            (mounted / name).write_bytes(data)
        with contextlib.suppress(OSError), open(mounted / ".filler", "wb", buffering=0) as f:
            while True:
                f.write(b"\0" * 4096)
        yield mounted


def killed_write(path: Path, size: int = 1000) -> tuple[Path, int]:
    """A real write killed half-way: a process writes `size` bytes to `path` through `fileio.atomic_output` and is
    killed with SIGKILL inside the block (as kill -9 or a pre-emption would). Returns (the temporary file it left,
    the dead writer's PID); the process is reaped, so its PID names no live process."""
    import signal
    import sys

    before = set(path.parent.glob(".*.tmp"))
    code = (
        "import os, signal, sys\nfrom transformer.fileio import atomic_output\n"
        "with atomic_output(sys.argv[1], 'wb') as f:\n"
        "    f.write(b'x' * int(sys.argv[2])); f.flush(); os.kill(os.getpid(), signal.SIGKILL)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(path), str(size)])
    assert proc.wait(timeout=60) == -signal.SIGKILL
    (left,) = set(path.parent.glob(".*.tmp")) - before
    return left, proc.pid
