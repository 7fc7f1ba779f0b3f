"""Batching across requests, in turns: lines of concurrent requests decoded together, each request answered with
its own lines, and no request holding the decoder for long.

One worker thread owns the model. Requests (`Job`s) wait in a bounded queue, in turn order. The worker decodes in
rounds of at most `max_tokens` of work. In each round the unfinished jobs share that budget: each, in turn order,
offers its next lines up to an equal share (at least one line); the round's lines are grouped by `Job.key`
(requests with the same decoding settings are decoded in one call), decoded, and each job keeps its slice of the
results; a job whose lines are all decoded is answered. The jobs served go to the back of the turn order. So a lone
long request is decoded in rounds of the whole budget (large batches), and a request that arrives meanwhile waits
for the round in progress, then shares the next one. Work is each line's weight (work.py: source tokens and
control pieces). When the worker is idle, the first job gathers others for up to `wait_s` (ended at once when
`max_tokens` of work waits): concurrent small requests then share a call, and under load the rounds grow by
themselves.

A job past its `deadline`, or `cancel`led (its request was answered meanwhile), is dropped at its next turn: it
gets `ExpiredError` and no more of its lines are decoded. The queue is bounded by lines admitted and not yet answered
(`capacity`): `submit` refuses a job that would pass it, and the server answers 503 with Retry-After, so memory is
bounded by the work admitted. `close()` stops admitting, decodes what was admitted (each job within its deadline),
and stops the thread.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


class ExpiredError(Exception):
    """A job dropped before all its lines were decoded: past its deadline, or cancelled."""


@dataclass(eq=False)
class Job:
    """One request's lines, what they are decoded with, and where the results (or the error) go."""

    lines: list[str]
    key: Hashable  # jobs with equal keys are decoded in one call
    weights: list[int]  # each line's work (work.py), for the rounds' budget
    deliver: Callable[[Any], None]  # called once, from the worker: a list (one result per line) or an exception
    controls: dict[str, list] = field(default_factory=dict)  # per-line lists (prefix, constraints), joined per group
    deadline: float = math.inf  # time.monotonic() past which the job is dropped (ExpiredError)
    name: str = ""  # the request's id, for the log
    cancelled: bool = False  # set by `cancel` from any thread: dropped at its next turn
    results: list = field(default_factory=list)  # the lines decoded so far, in order (the worker's)

    def cancel(self) -> None:
        """No more of this job's lines are decoded (its request was answered)."""
        self.cancelled = True

    def next_turn(self, budget: int) -> tuple[int, int]:
        """(start, end): the lines of this job's next turn, while their work stays within `budget` (at least one)."""
        start = end = len(self.results)
        work = 0
        while end < len(self.lines) and (end == start or work + self.weights[end] <= budget):
            work, end = work + self.weights[end], end + 1
        return start, end


Turn = tuple[Job, int, int]  # a job and the [start, end) of its lines decoded in a round


class Batcher:
    """A bounded queue of jobs and the thread that decodes them, a turn of each at a time, with
    `decode(key, lines, controls) -> results`."""

    def __init__(
        self,
        decode: Callable[[Hashable, list[str], dict[str, list]], list],
        *,
        wait_s: float,
        max_tokens: int,
        capacity: int,
    ) -> None:
        self.decode, self.wait_s, self.max_tokens, self.capacity = decode, wait_s, max_tokens, capacity
        self._jobs: deque[Job] = deque()  # admitted and not answered, in turn order
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
            self._jobs.append(job)
            self._changed.notify_all()
        return True

    def close(self, timeout: float | None = None) -> None:
        """Admit nothing more, decode what was admitted, stop the worker (waiting at most `timeout` seconds)."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while (turns := self._next_round()) is not None:
            groups: dict[Hashable, list[Turn]] = {}
            for turn in turns:
                groups.setdefault(turn[0].key, []).append(turn)
            for key, group in groups.items():
                self._decode_group(key, group)

    def _next_round(self) -> list[Turn] | None:
        """The next round's turns ([] when every job waiting was dropped); None once closed with nothing left."""
        with self._changed:
            if not self._jobs:
                while not self._jobs and not self._closed:
                    self._changed.wait()
                if not self._jobs:
                    return None
                self._gather()
            self._drop_ended()
            return self._take_turns()

    def _gather(self) -> None:
        """The worker was idle: let the first job wait `wait_s` for others, or until `max_tokens` of work waits."""
        deadline = time.monotonic() + self.wait_s
        while not self._closed and sum(sum(job.weights) for job in self._jobs) < self.max_tokens:
            left = deadline - time.monotonic()
            if left <= 0 or not self._changed.wait(left):
                break

    def _drop_ended(self) -> None:
        """Drop the jobs past their deadline or cancelled: each gets ExpiredError."""
        now = time.monotonic()
        for job in [job for job in self._jobs if job.cancelled or job.deadline <= now]:
            self._finish(job, ExpiredError(f"dropped after {len(job.results)} of its {len(job.lines)} lines"))

    def _take_turns(self) -> list[Turn]:
        """A turn of each job in turn order, each up to an equal share of `max_tokens`, while the round's work stays
        within `max_tokens` (at least one turn); the jobs served go to the back."""
        turns, work, share = [], 0, self.max_tokens // max(len(self._jobs), 1)
        for job in self._jobs:
            start, end = job.next_turn(share)
            cost = sum(job.weights[start:end])
            if turns and work + cost > self.max_tokens:
                break
            turns.append((job, start, end))
            work += cost
        self._jobs.rotate(-len(turns))
        return turns

    def _decode_group(self, key: Hashable, group: list[Turn]) -> None:
        """Decode one group's turns in one call; each job keeps its slice, and is answered once it is complete (or
        gets the error, as every job of the call does)."""
        lines = [line for job, start, end in group for line in job.lines[start:end]]
        names = group[0][0].controls
        controls = {name: [v for job, start, end in group for v in job.controls[name][start:end]] for name in names}
        try:
            results = self.decode(key, lines, controls)
        except Exception as exc:  # the model's error is each request's 500; the worker goes on
            requests = ", ".join(job.name or "?" for job, _, _ in group)
            log.error("decoding %d line(s) of request(s) %s failed", len(lines), requests, exc_info=exc)
            for job, _, _ in group:
                self._finish(job, exc)
            return
        place = 0
        for job, start, end in group:
            job.results.extend(results[place : place + end - start])
            place += end - start
            if len(job.results) == len(job.lines):
                self._finish(job, job.results)

    def _finish(self, job: Job, value: Any) -> None:
        """Answer `job` with `value` (its results, or an error) and free its lines."""
        with self._changed:
            self._jobs.remove(job)
            self._admitted_lines -= max(len(job.lines), 1)
        job.deliver(value)
