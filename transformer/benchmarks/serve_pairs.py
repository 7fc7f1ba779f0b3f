"""Several models in one server, measured (scripts/benchmark_serve_pairs.py; docs/serving.md has the table).

- Pivot latency: one client sends single sentences one request at a time, a direct pair's and a pivoted pair's
  (through the pivot language: two models in series) taking turns; the median latency of each and their ratio.
- Two pairs under load: `clients` clients on one pair, then the same on the other, then both at once (each pair's
  own clients over its own sentences): each pair's sentences/s and p50/p99 latency alone and together. With one
  worker per model, neither pair should stall while the other is busy; on a CPU the two share the cores.
The server is the real one (`python -m transformer serve --model A --model B ...`), in its own process.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence

from transformer.benchmarks.serve_load import Level, run_clients, translate_one

Pair = tuple[str, str]


def pivot_latency(port: int, sentences: Sequence[str], direct: Pair, pivoted: Pair, rounds: int = 1) -> dict:
    """{"direct_ms", "pivot_ms", "ratio"}: median latencies of single-sentence requests over `sentences`, the two
    routes taking turns (after one warm-up request each)."""
    times: dict[str, list[float]] = {"direct": [], "pivot": []}
    for route in (direct, pivoted):
        translate_one(port, sentences[0], *route)
    for _ in range(rounds):
        for sentence in sentences:
            for name, route in (("direct", direct), ("pivot", pivoted)):
                start = time.perf_counter()
                translate_one(port, sentence, *route)
                times[name].append(time.perf_counter() - start)
    direct_ms = 1000 * statistics.median(times["direct"])
    pivot_ms = 1000 * statistics.median(times["pivot"])
    return {"direct_ms": round(direct_ms, 2), "pivot_ms": round(pivot_ms, 2), "ratio": round(pivot_ms / direct_ms, 2)}


def _level(level: Level, label: str) -> dict:
    p50, p99 = (None if s is None else round(1000 * s, 1) for s in (level.p50_s, level.p99_s))
    return {"pair": label, "sentences_per_s": round(level.sentences_per_s, 2), "p50_ms": p50, "p99_ms": p99}


def two_pairs(port: int, work: dict[Pair, Sequence[str]], clients: int) -> dict:
    """{"alone": [each pair's level with only its clients], "together": [each pair's level with both pairs'
    clients at once]}; work: {pair: its sentences}. Each pair is warmed up first (8 sentences, not counted)."""
    for pair, sentences in work.items():
        run_clients(port, list(sentences[:8]), 4, pair)
    alone = [_level(run_clients(port, list(s), clients, pair), "-".join(pair)) for pair, s in work.items()]
    together: dict[Pair, Level] = {}

    def run(pair: Pair, sentences: Sequence[str]) -> None:
        together[pair] = run_clients(port, list(sentences), clients, pair)

    threads = [threading.Thread(target=run, args=item) for item in work.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"alone": alone, "together": [_level(together[pair], "-".join(pair)) for pair in work]}
