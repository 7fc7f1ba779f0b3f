"""Who may ask and how often: API keys with their own limits, and requests per minute per client, with
LibreTranslate's names and answers (docs/serving.md, "Keys and limits").

- The keys file (`--api-keys FILE`, edited by hand or with `transformer-keys`): one key a line, optionally followed
  by its own request limit per minute and its own character limit per request (`KEY [REQ_LIMIT [CHAR_LIMIT]]`,
  whitespace between; blank lines and '#' comments skipped). A key without a limit has the server's
  (`--req-limit`, `--char-limit`). The server reads the file again when it changes (checked at most every
  RELOAD_S), so keys are added and removed without a restart; a file that no longer reads keeps the keys it had.
- `--req-limit N`: requests per minute per client, over a moving window of 60 s; the client is its API key when it
  gives a valid one, else its address (LibreTranslate's `key_func`). A request is admitted while its client's
  window holds fewer than the limit, and then counts one per item of a list `q`, as LibreTranslate counts it.
  Past the limit: 429 `Slowdown: N per 1 minute` with Retry-After, and nothing of that request is done; other
  clients and keys go on. Memory is bounded: at most CLIENTS clients are tracked (the least recently seen go
  first), each with at most its limit of entries.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path

from transformer.errors import UserError
from transformer.serving.requests import ApiError

log = logging.getLogger(__name__)
RELOAD_S = 1.0  # how often, at most, the keys file's change is looked for
WINDOW_S = 60.0  # the rate limit's moving window, seconds (LibreTranslate's "per minute")
CLIENTS = 100_000  # clients whose recent requests are tracked at once


@dataclass(frozen=True)
class KeyLimits:
    """A key's own limits (None: the server's)."""

    req_limit: int | None = None  # requests per minute
    char_limit: int | None = None  # characters per request


def parse_keys(text: str, path: str | Path = "the keys file") -> dict[str, KeyLimits]:
    """{key: its limits} of a keys file's text; a malformed line is a UserError naming it."""
    keys: dict[str, KeyLimits] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        limits = words[1:]
        if len(limits) > 2 or not all(word.isdigit() and int(word) > 0 for word in limits):
            raise UserError(
                f"{path} line {number}: write KEY [REQ_LIMIT [CHAR_LIMIT]] (positive integers), got {line.strip()!r}"
            )
        numbers = [int(word) for word in limits] + [None, None]
        keys[words[0]] = KeyLimits(numbers[0], numbers[1])
    return keys


def read_keys(path: str | Path) -> dict[str, KeyLimits]:
    """The API keys of `path` with their limits; an unreadable file, a bad line or no key at all is a UserError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the API keys file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    keys = parse_keys(text, path)
    if not keys:
        raise UserError(f"the API keys file {path} has no key: write one key per line")
    return keys


class KeyRing:
    """The valid keys and their limits: fixed (`KeyRing(keys)`) or read from a file and re-read when it changes."""

    def __init__(self, keys: dict[str, KeyLimits] | frozenset[str] | set[str], path: str | Path | None = None) -> None:
        self.keys = keys if isinstance(keys, dict) else {key: KeyLimits() for key in keys}
        self.path = path
        self._stamp = self._file_stamp()
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | Path) -> KeyRing:
        return cls(read_keys(path), path)

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path) if self.path else None
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size) if stat else None

    def _reload(self) -> None:
        """Read the file again if it changed since it was last read (at most every RELOAD_S)."""
        now = time.monotonic()
        if self.path is None or now - self._checked < RELOAD_S:
            return
        with self._lock:
            self._checked, stamp = now, self._file_stamp()
            if stamp == self._stamp:
                return
            self._stamp = stamp
            try:
                self.keys = read_keys(self.path)
                log.info("API keys: %d read again from %s", len(self.keys), self.path)
            except UserError as exc:
                log.warning("API keys: %s; the %d keys read before stay", exc, len(self.keys))

    def lookup(self, key: object) -> KeyLimits | None:
        """The limits of `key`, None when it is no valid key (compared in constant time)."""
        self._reload()
        if not isinstance(key, str):
            return None
        given = key.encode("utf-8", "surrogatepass")
        found = None
        for known, limits in self.keys.items():
            if hmac.compare_digest(given, known.encode("utf-8")):
                found = limits
        return found


class RateLimiter:
    """Requests per WINDOW_S per client, over a moving window; a client's limit is given with each request."""

    def __init__(self) -> None:
        self._seen: OrderedDict[str, deque[tuple[float, int]]] = OrderedDict()  # client -> (time, cost), oldest first

    def admit(self, client: str, limit: int, cost: int = 1) -> None:
        """Count `cost` requests of `client` when its window has room for one more (as LibreTranslate's limiter,
        which counts a request's cost once it is admitted), else a 429 with nothing counted. Called from the event
        loop's thread only."""
        now = time.monotonic()
        seen = self._seen.pop(client, None) or deque()
        while seen and seen[0][0] <= now - WINDOW_S:
            seen.popleft()
        used = sum(count for _, count in seen)
        if used >= limit:
            self._keep(client, seen)
            wait = self._wait(seen, used - limit + 1, now)
            raise ApiError(429, f"Slowdown: {limit} per 1 minute", {"Retry-After": str(wait)})
        seen.append((now, cost))
        self._keep(client, seen)

    def _keep(self, client: str, seen: deque[tuple[float, int]]) -> None:
        if seen:
            self._seen[client] = seen
            while len(self._seen) > CLIENTS:
                self._seen.popitem(last=False)

    @staticmethod
    def _wait(seen: deque[tuple[float, int]], excess: int, now: float) -> int:
        """Whole seconds until the oldest requests holding `excess` of the count leave the window."""
        freed = 0
        for when, count in seen:
            freed += count
            if freed >= excess:
                return max(1, int(when + WINDOW_S - now) + 1)
        return 1
