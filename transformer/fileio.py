"""File safety for every command: atomic outputs, outputs that are never inputs, the run-directory lock, UTF-8
input with line numbers, and file-system errors turned into one-line `UserError`s.

- `atomic_output(path)`: the data goes to a temporary file in the same folder, is fsynced, and renamed over
  `path` only when the block ends without an exception; on an error or a signal the temporary file is removed and
  the previous contents of `path` are untouched. A path that exists and is not a regular file (`/dev/null`,
  `/dev/stdout`, a FIFO) is written directly, as there is nothing to rename over.
- `check_not_an_input(output, inputs)`: refuses an output that is the same file as an input, also through
  symbolic or hard links.
- `RunLock(folder)`: `train.lock` created with O_EXCL holding the owner's PID and host; a second run is refused
  naming the holder; a lock whose process is gone (kill -9) is taken over.
- `os_error(exc, path)`: ENOSPC, EROFS, EACCES, ENOTDIR, EEXIST, ... as one line naming the path and the fix.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from transformer.errors import UserError

_FIXES = {
    errno.ENOSPC: "the disk is full: free some space or write somewhere else",
    errno.EDQUOT: "the disk quota is exceeded: free some space or write somewhere else",
    errno.EROFS: "the file system is read-only: choose a writable location",
    errno.EACCES: "permission denied: choose a location you may write to",
    errno.EPERM: "operation not permitted: choose a location you may write to",
    errno.ENOTDIR: "a part of the path is a file, not a folder: remove it or choose another path",
    errno.EEXIST: "a part of the path is a file, not a folder: remove it or choose another path",
    errno.EISDIR: "it is a folder: give a file name",
    errno.ENAMETOOLONG: "the name is too long: choose a shorter path",
    errno.ENOENT: "a folder on the path does not exist",
}


def os_error(exc: OSError, path: str | Path | None = None, action: str = "write") -> UserError:
    """One line for a file-system error: the path, the system's reason, and the fix."""
    where = path if path is not None else (exc.filename or "a file")
    fix = _FIXES.get(exc.errno or -1, exc.strerror or str(exc))
    return UserError(f"cannot {action} {where}: {fix} ({exc.strerror or type(exc).__name__}, errno {exc.errno})")


def is_fs_error(exc: BaseException) -> bool:
    """True for the OSErrors that the user's environment causes (full disk, permissions, paths), not bugs."""
    return isinstance(exc, OSError) and exc.errno in _FIXES


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_not_an_input(output: str | Path | None, inputs: Iterable[tuple[str, str | Path | None]]) -> None:
    """Refuse `output` when it is the same file as one of `inputs` ((flag, path) pairs), through links too."""
    if output is None or str(output) == "-":
        return
    for flag, path in inputs:
        if path is not None and str(path) != "-" and _same(Path(output), Path(path)):
            raise UserError(f"the output {output} is the same file as {flag} {path}; writing it would destroy the "
                            "input: choose another output path")  # fmt: skip


@contextlib.contextmanager
def atomic_output(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """A file object for `path` that replaces it only on success (see the module docstring).

    A symbolic link is followed (its target is replaced, the link kept); an existing file keeps its permissions.
    """
    path = Path(os.path.realpath(path)) if Path(path).is_symlink() else Path(path)
    binary = "b" in mode
    encoding = None if binary else "utf-8"
    if path.exists() and not path.is_file() and not path.is_dir():  # /dev/null, /dev/full, a FIFO
        try:
            with open(path, mode, encoding=encoding) as f:
                yield f
        except OSError as exc:
            raise os_error(exc, path) from None
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise os_error(exc, path) from None
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o7777 if path.is_file() else 0o666 & ~_umask())  # mkstemp's is 0600
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and is_fs_error(exc):
            raise os_error(exc, path) from None
        raise
    _fsync_folder(path.parent)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # some file systems cannot open or sync a folder; the rename is done
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_text(path: str | Path, text: str) -> None:
    """Write a whole text file atomically."""
    with atomic_output(path) as f:
        f.write(text)


# ------------------------------------------------------------------------------------------------- input


def utf8_lines(lines: Iterable[bytes], name: str) -> Iterator[str]:
    """Decode byte lines as UTF-8, newline removed; a leading byte-order mark is not text.

    A line that is not UTF-8 is a `UserError` naming `name` and the line number.
    """
    for number, raw in enumerate(lines, start=1):
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            raise UserError(f"{name} line {number} is not valid UTF-8 ({exc.reason}); convert it to UTF-8") from None


# ------------------------------------------------------------------------------------------------- signals


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; `code` is the conventional exit status 128 + signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.code = 128 + signum


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGINT and SIGTERM raise `Interrupted` inside the block (so `atomic_output` cleans up), then are restored."""

    def handler(signum, frame):
        raise Interrupted(signum)

    try:
        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: leave the signals alone
        yield
        return
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# ------------------------------------------------------------------------------------------------- run lock


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class RunLock:
    """An exclusive lock on a run directory (`<folder>/train.lock`); use as a context manager."""

    def __init__(self, folder: str | Path) -> None:
        self.path = Path(folder) / "train.lock"
        self.held = False

    def _holder(self) -> tuple[int, str] | None:
        try:
            pid, _, host = self.path.read_text(encoding="utf-8").strip().partition(" ")
            return int(pid), host
        except (OSError, ValueError):
            return None

    def check(self) -> bool:
        """Refuse (`UserError`) when a live process holds the lock; False when it is free, True when stale."""
        holder = self._holder() if self.path.exists() else None
        if holder is None:
            return self.path.exists()
        if holder[1] == socket.gethostname() and not _alive(holder[0]):
            return True  # left by a run that was killed
        raise UserError(
            f"{self.path.parent} is in use by another training run (PID {holder[0]} on {holder[1]}); wait for it "
            f"to finish, stop it, or choose another train.out_dir (remove {self.path} if that process is not a "
            "training run)"
        )

    def acquire(self) -> None:
        """Write our PID to a private file, then hard-link it to `train.lock`: the link fails if the lock exists,
        and a lock is never seen half-written."""
        mine = self.path.with_name(f".train.lock.{os.getpid()}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            mine.write_text(f"{os.getpid()} {socket.gethostname()}\n", encoding="utf-8")
            for _ in range(3):
                try:
                    os.link(mine, self.path)
                except FileExistsError:
                    if self.check():
                        self.path.unlink(missing_ok=True)  # stale
                    continue
                self.held = True
                return
        except OSError as exc:
            raise os_error(exc, self.path.parent, "create the run directory") from None
        finally:
            with contextlib.suppress(OSError):
                mine.unlink()
        raise UserError(f"cannot take the lock {self.path}: other processes keep taking it; try again")

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
