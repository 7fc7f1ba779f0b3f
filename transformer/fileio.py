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
- Temporary files are named `.<name>.<PID>@<host>.<random>.tmp` after their writer, so that
  `remove_stale_temporaries(folder)` (run by the holder of the folder's lock) removes those a killed process left
  (a checkpoint's can be gigabytes) and never one that a live process may still be writing.
- `os_error(exc, path)`: ENOSPC, EROFS, EACCES, ENOTDIR, EEXIST, ... as one line naming the path and the fix.
- `decode_utf8`, `utf8_lines`: text that is not UTF-8 is one line naming the file, the line and the byte offset.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
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
            raise UserError(
                f"the output {output} is the same file as {flag} {path}; writing it would destroy the "
                "input: choose another output path"
            )


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
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{_writer()}.", suffix=".tmp")
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


def _writer() -> str:
    """Who writes a temporary file, in its name: `PID@host` (`remove_stale_temporaries` reads it back)."""
    return f"{os.getpid()}@{socket.gethostname()}"


_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)@(?P<host>[^/]+)\.[^.]+\.tmp$")  # `atomic_output`'s names


def remove_stale_temporaries(folder: str | Path) -> list[tuple[Path, int]]:
    """Remove the temporary files of `atomic_output` in `folder` whose writer, named in the file name, is a process
    of this host that is no longer running (a write killed by kill -9 or a pre-emption); a live process's, another
    host's and one not named are kept. Returns (path, bytes) of those removed. For the holder of the folder's
    `RunLock`, which no other run of this project writes into."""
    removed, host = [], socket.gethostname()
    for path in sorted(Path(folder).glob(".*.tmp")):
        match = _TEMPORARY.match(path.name)
        if match and match["host"] == host and not _alive(int(match["pid"])):
            with contextlib.suppress(OSError):  # removed meanwhile by someone else, or not ours to remove
                size = path.stat().st_size
                path.unlink()
                removed.append((path, size))
    return removed


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


def decode_utf8(raw: bytes, name: str | Path, *, first_line: int = 1, first_byte: int = 0) -> str:
    """The bytes of file `name` from byte `first_byte` (line `first_line`) as text; a byte-order mark at the start
    of the file is not text. Bytes that are not UTF-8 are a `UserError` naming the file, the line and the byte offset.
    """
    bom = 3 if first_byte == 0 and raw.startswith(b"\xef\xbb\xbf") else 0
    try:
        return str(memoryview(raw)[bom:], "utf-8")  # no copy of `raw`
    except UnicodeDecodeError as exc:
        start = bom + exc.start
        line = first_line + raw.count(b"\n", 0, start)
        raise UserError(
            f"{name} line {line} is not valid UTF-8 (byte offset {first_byte + start}: {exc.reason}); "
            "convert it to UTF-8"
        ) from None


def utf8_lines(lines: Iterable[bytes], name: str | Path) -> Iterator[str]:
    """Decode byte lines as UTF-8 (`decode_utf8`: the same errors, the byte-order mark dropped), newline removed."""
    offset = 0
    for number, raw in enumerate(lines, start=1):
        yield decode_utf8(raw, name, first_line=number, first_byte=offset).rstrip("\r\n")
        offset += len(raw)


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
