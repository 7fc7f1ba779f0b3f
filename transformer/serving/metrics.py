"""The server's counters for GET /metrics: requests by status, sentences, tokens, latency percentiles, and each
model's pair, checkpoints, memory (its parameters and buffers, bytes) and queue.

Updated from the event loop's thread only (no lock). Latencies are kept for the last `WINDOW` requests; the
percentiles are nearest-rank over that window, in milliseconds.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque

WINDOW = 1000  # requests whose latencies the percentiles are taken over
PERCENTILES = (50, 90, 99)


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile p (0 < p <= 100) of ascending `sorted_values` (0.0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


class Metrics:
    """Counts since the server started, and the latencies of the last `WINDOW` requests."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.statuses: Counter[int] = Counter()
        self.sentences = self.source_tokens = self.target_tokens = 0
        self.latencies: deque[float] = deque(maxlen=WINDOW)

    def request(self, status: int, seconds: float) -> None:
        """One answered request (any endpoint)."""
        self.statuses[status] += 1
        self.latencies.append(seconds)

    def work(self, sentences: int, source_tokens: int, target_tokens: int) -> None:
        """What one translation request decoded: lines, their source tokens, and the best hypotheses' tokens."""
        self.sentences += sentences
        self.source_tokens += source_tokens
        self.target_tokens += target_tokens

    def snapshot(self, queues: dict, queue_capacity: int, models: list | None = None) -> dict:
        """The JSON answer of GET /metrics. queues: {pair: lines admitted and unanswered}; models: registry.Model's
        (the capacity is each model's)."""
        ordered = sorted(self.latencies)
        return {
            "uptime_s": round(time.monotonic() - self.started, 3),
            "requests": sum(self.statuses.values()),
            "requests_by_status": {str(k): v for k, v in sorted(self.statuses.items())},
            "sentences": self.sentences,
            "source_tokens": self.source_tokens,
            "target_tokens": self.target_tokens,
            "queue_lines": sum(queues.values()),
            "queue_capacity": queue_capacity,
            "latency_ms": {f"p{p}": round(percentile(ordered, p) * 1000, 2) for p in PERCENTILES},
            "latency_window": len(ordered),
            "models": [
                {
                    "pair": model.label,
                    "checkpoints": list(model.checkpoints),
                    "memory_bytes": model.memory_bytes,
                    "queue_lines": queues.get(model.pair, 0),
                }
                for model in models or []
            ],
        }
