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
