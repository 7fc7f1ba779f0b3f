"""Translated files kept for download (POST /translate_file, GET /download_file/NAME): in memory, bounded in bytes,
each for a limited time.

`put(name, data, media_type)` keeps a file and answers its key, `<id>.<name>` as LibreTranslate names its files
(id: 32 random hex digits, so no key can be guessed from another); `get(key)` answers the file, or None when the
key is unknown or the file has expired. The files' bytes together stay within `max_bytes`: a new file pushes out
the oldest ones until it fits, and a file larger than the whole store is not kept (None). A file older than `ttl_s`
is gone (dropped as the store is next used). Nothing touches the disk, and a key is only ever looked up, so no
request can name a file of the machine. Safe to call from several threads (one lock; every step is cheap).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class StoredFile:
    """A translated file as it is downloaded."""

    name: str  # the download's file name (Content-Disposition)
    data: bytes
    media_type: str  # its Content-Type
    stored: float  # when it was kept (the store's clock)


class FileStore:
    """Files by key, oldest first, within `max_bytes` in all and `ttl_s` seconds each."""

    def __init__(self, *, max_bytes: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes, self.ttl_s, self.clock = max_bytes, ttl_s, clock
        self._files: OrderedDict[str, StoredFile] = OrderedDict()  # oldest first
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def stored_bytes(self) -> int:
        """The bytes of the files kept now."""
        return self._bytes

    def put(self, name: str, data: bytes, media_type: str) -> str | None:
        """Keep `data` as `name`: its key, or None (nothing kept) when it is larger than the whole store."""
        if len(data) > self.max_bytes:
            return None
        key = f"{secrets.token_hex(16)}.{name}"
        with self._lock:
            self._expire()
            while self._bytes + len(data) > self.max_bytes:
                self._drop(next(iter(self._files)))
            self._files[key] = StoredFile(name, data, media_type, self.clock())
            self._bytes += len(data)
        return key

    def get(self, key: str) -> StoredFile | None:
        """The file kept under `key`; None when there is none or it has expired."""
        with self._lock:
            self._expire()
            return self._files.get(key)

    def _expire(self) -> None:
        """Drop the files older than `ttl_s` (the oldest come first)."""
        oldest = self.clock() - self.ttl_s
        while self._files and next(iter(self._files.values())).stored <= oldest:
            self._drop(next(iter(self._files)))

    def _drop(self, key: str) -> None:
        self._bytes -= len(self._files.pop(key).data)
