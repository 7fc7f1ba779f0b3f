"""Batches made ready while the current update runs: collated (and on CUDA pinned and copied) on a thread.

A background thread draws from a source of (tag, host batch) pairs, where the tag is the sampler's state after
that batch; on CUDA it pins each batch and copies it on a side stream with `non_blocking` copies, recording an
event. The consumer gets the pairs in the source's order; on CUDA its stream waits for that batch's event, and each
tensor is marked as used there (`record_stream`) so the allocator never hands its memory back to the side stream
while the update reads it. The tag travels with the batch, so a checkpoint can record the sampler position of the
batches actually trained, not of those drawn ahead. `depth` 0 draws and moves in the caller's thread instead.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import torch

_DONE = object()  # the source is exhausted
_POLL_S = 0.1  # how often a blocked producer looks at the stop flag


class Prefetcher:
    """Iterates over (tag, batch on `device`) in the source's order; use as a context manager (or call `close`).

    source: (tag, batch) pairs, batch with `to(device, non_blocking)` and `pin_memory()` (`batching.Batch`).
    depth: batches made ahead (the queue's size); 0 for none. An exception in the source is raised to the
    consumer at the batch where it happened; `close` stops and joins the thread (no thread outlives it).
    """

    def __init__(self, source: Iterable[tuple[Any, Any]], device: torch.device, *, depth: int) -> None:
        self.device, self.depth = device, depth
        self.cuda = device.type == "cuda"
        self._source = iter(source)
        self._queue: queue.Queue = queue.Queue(maxsize=max(depth, 1))
        self._stop = threading.Event()
        self._thread = None
        if depth > 0:
            self._thread = threading.Thread(target=self._produce, name="batch-prefetch", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------------------ producer side

    def _produce(self) -> None:
        try:
            if self.cuda:
                torch.cuda.set_device(self.device)  # this thread's current device (DDP: one per process)
            stream = torch.cuda.Stream(self.device) if self.cuda else None
            for tag, batch in self._source:
                event = None
                if stream is not None:
                    with torch.cuda.stream(stream):
                        batch = batch.pin_memory().to(self.device, non_blocking=True)
                        event = torch.cuda.Event()
                        event.record(stream)
                if not self._put((tag, batch, event)):
                    return
            self._put(_DONE)
        except BaseException as exc:  # handed to the consumer, raised there
            self._put(exc)

    def _put(self, item) -> bool:
        """Blocks while the queue is full; False when the consumer closed meanwhile."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    # ------------------------------------------------------------------------------ consumer side

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return self

    def __next__(self) -> tuple[Any, Any]:
        if self._thread is None:  # no prefetching: draw and move here
            tag, batch = next(self._source)
            return tag, batch.to(self.device, non_blocking=True)
        item = self._queue.get()
        if item is _DONE:
            self._queue.put(_DONE)  # stays exhausted
            raise StopIteration
        if isinstance(item, BaseException):
            self._queue.put(item)
            raise item
        tag, batch, event = item
        if event is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(event)
            for tensor in (batch.src, batch.tgt_in, batch.tgt_out, batch.tgt_index):
                tensor.record_stream(current)
        return tag, batch

    def close(self) -> None:
        """Stop the producer and join it; batches drawn ahead are dropped (their tags were never handed out)."""
        self._stop.set()
        if self._thread is not None:
            while self._thread.is_alive():
                with contextlib.suppress(queue.Empty):
                    self._queue.get(timeout=_POLL_S)
            self._thread.join()
        close = getattr(self._source, "close", None)  # a generator source: run its cleanup now
        if close is not None:
            close()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
