"""Batching across requests: lines of concurrent requests decoded together, each request answered with its own.

One worker thread owns the model. Requests (`Job`s) wait in a bounded queue; the worker takes the first waiting
job, then gathers more for up to `wait_s` (the gathering ends at once when `max_tokens` source tokens wait),
groups what it took by `Job.key` (requests with the same decoding settings are decoded in one call), decodes each
group, and hands every job its own slice of the results, in its own line order. The queue is bounded by lines
admitted and not yet answered (`capacity`): `submit` refuses a job that would pass it, and the server answers 503
with Retry-After, so memory is bounded by the work admitted. `close()` stops admitting, decodes what was admitted,
and stops the thread.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class Job:
    """One request's lines, what they are decoded with, and where the results (or the error) go."""

    lines: list[str]
    key: Hashable  # jobs with equal keys are decoded in one call
    tokens: int  # source tokens, for the gathering's budget
    deliver: Callable[[Any], None]  # called from the worker with a list (one result per line) or an exception
    controls: dict[str, list] = field(default_factory=dict)  # per-line lists (prefix, constraints), joined per group


class Batcher:
    """A bounded queue of jobs and the thread that decodes them with `decode(key, lines, controls) -> results`."""

    def __init__(
        self,
        decode: Callable[[Hashable, list[str], dict[str, list]], list],
        *,
        wait_s: float,
        max_tokens: int,
        capacity: int,
    ) -> None:
        self.decode, self.wait_s, self.max_tokens, self.capacity = decode, wait_s, max_tokens, capacity
        self._jobs: deque[Job] = deque()
        self._waiting_tokens = 0
        self._admitted_lines = 0  # waiting or being decoded
        self._closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="decoder", daemon=True)

    @property
    def queued_lines(self) -> int:
        """Lines admitted and not yet answered."""
        return self._admitted_lines

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> bool:
        """Queue `job`; False (nothing queued) when its lines would pass the capacity or the batcher is closed.
        A job larger than the whole capacity is admitted into an empty queue, so no request size starves."""
        with self._changed:
            lines = max(len(job.lines), 1)
            full = self._admitted_lines and self._admitted_lines + lines > self.capacity
            if self._closed or full:
                return False
            self._admitted_lines += lines
            self._waiting_tokens += job.tokens
            self._jobs.append(job)
            self._changed.notify_all()
        return True

    def close(self, timeout: float | None = None) -> None:
        """Admit nothing more, decode what was admitted, stop the worker."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _gather(self) -> list[Job]:
        """The next jobs to decode: waits for one, then for `wait_s` more or until `max_tokens` tokens wait;
        [] once closed with nothing left."""
        with self._changed:
            while not self._jobs and not self._closed:
                self._changed.wait()
            deadline = time.monotonic() + self.wait_s
            while self._jobs and not self._closed and self._waiting_tokens < self.max_tokens:
                left = deadline - time.monotonic()
                if left <= 0 or not self._changed.wait(left):
                    break
            taken, tokens = [], 0
            while self._jobs and (not taken or tokens + self._jobs[0].tokens <= self.max_tokens):
                job = self._jobs.popleft()
                taken.append(job)
                tokens += job.tokens
            self._waiting_tokens -= tokens
            return taken

    def _run(self) -> None:
        while jobs := self._gather():
            groups: dict[Hashable, list[Job]] = {}
            for job in jobs:
                groups.setdefault(job.key, []).append(job)
            for key, group in groups.items():
                self._decode_group(key, group)

    def _decode_group(self, key: Hashable, group: list[Job]) -> None:
        """Decode one group's lines in one call and deliver each job its slice (or the error, to every job)."""
        lines = [line for job in group for line in job.lines]
        controls = {name: list(itertools.chain(*(job.controls[name] for job in group))) for name in group[0].controls}
        error = None
        try:
            results = self.decode(key, lines, controls)
        except Exception as exc:  # the model's error is each request's 500; the worker goes on
            log.exception("decoding %d line(s) failed", len(lines))
            results, error = None, exc
        start = 0
        for job in group:
            end = start + len(job.lines)
            self._release(len(job.lines))
            job.deliver(error if error is not None else results[start:end])
            start = end

    def _release(self, lines: int) -> None:
        with self._changed:
            self._admitted_lines -= max(lines, 1)
