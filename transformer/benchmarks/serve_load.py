"""A load benchmark of transformer-serve (scripts/benchmark_serve.py; docs/serving.md has the table).

One run on one machine: the real server (`python -m transformer serve`, its own process) answers N concurrent
clients (1, 8, 32 by default), each sending single sentences of the test books one request at a time until the
shared list is done: sentences/s over the whole level, and each request's latency (p50, p99). Then, with the server
stopped, the same sentences through `Translator.translate` in this process: one call per sentence, and all in one
call. Levels and baselines are repeated `rounds` times, interleaved, and each figure is the median over rounds.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from transformer.config import DataConfig, SplitConfig
from transformer.data.corpus import load_pairs
from transformer.serving.metrics import percentile

TEST_BOOKS = Path(__file__).resolve().parents[2] / "data" / "bible-es-en" / "test.tsv.xz"  # the demo's test split


@dataclass
class Level:
    """What one configuration did: sentences per second over the level, latencies in seconds."""

    name: str
    sentences_per_s: float
    p50_s: float | None = None
    p99_s: float | None = None


def book_sentences(count: int, path: Path = TEST_BOOKS) -> list[str]:
    """`count` source sentences spread evenly over the test books (Esther, Daniel, Acts, James)."""
    sources, _ = load_pairs(SplitConfig(tsv=str(path), tsv_columns=(1, 2)), DataConfig(src_lang="es", tgt_lang="en"))
    step = max(1, len(sources) // count)
    return sources[::step][:count]


def start_server(checkpoint: str | list[str], log: Path, extra: list[str]) -> tuple[subprocess.Popen, int]:
    """The server of `checkpoint` (a list: the model flags themselves, `--model A --model B`) on a free loopback
    port: (process, port), once it listens."""
    models = ["--checkpoint", checkpoint] if isinstance(checkpoint, str) else checkpoint
    command = [sys.executable, "-m", "transformer", "serve", *models, "--port", "0", *extra]
    with open(log, "wb") as err:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, env=dict(os.environ))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        text = log.read_text(encoding="utf-8", errors="replace")
        if "serving on http://127.0.0.1:" in text:
            return process, int(text.split("serving on http://127.0.0.1:")[1].split()[0])
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"the server did not start: {log.read_text(encoding='utf-8', errors='replace')}")


def stop_server(process: subprocess.Popen) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=120)


def translate_one(port: int, sentence: str, source: str, target: str) -> str:
    """POST /translate for one sentence over a fresh connection (as a simple client does); its translatedText."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        body = json.dumps({"q": sentence, "source": source, "target": target})
        connection.request("POST", "/translate", body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read())
    finally:
        connection.close()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {answer}")
    return answer["translatedText"]


def run_clients(port: int, sentences: list[str], clients: int, languages: tuple[str, str]) -> Level:
    """`clients` threads taking sentences from one shared list until it is done; the level's figures."""
    work = iter(enumerate(sentences))
    lock, latencies, errors = threading.Lock(), [], []

    def client() -> None:
        while True:
            with lock:
                item = next(work, None)
            if item is None:
                return
            start = time.perf_counter()
            try:
                translate_one(port, item[1], *languages)
            except Exception as exc:  # counted and reported: a benchmark with failures is no benchmark
                errors.append(exc)
            with lock:
                latencies.append(time.perf_counter() - start)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} request(s) failed, e.g. {errors[0]}")
    ordered = sorted(latencies)
    name = f"server, {clients} client{'s' if clients > 1 else ''}"
    return Level(name, len(sentences) / elapsed, percentile(ordered, 50), percentile(ordered, 99))


def python_api(translator, sentences: list[str]) -> list[Level]:
    """The same sentences through Translator.translate: one call per sentence, then all in one call."""
    start = time.perf_counter()
    for sentence in sentences:
        translator.translate([sentence])
    one = len(sentences) / (time.perf_counter() - start)
    start = time.perf_counter()
    translator.translate(sentences)
    batch = len(sentences) / (time.perf_counter() - start)
    return [Level("Translator.translate, one sentence a call", one), Level("Translator.translate, one call", batch)]


def median_levels(rounds: list[list[Level]]) -> list[Level]:
    """Each level's median over the rounds (sentences/s and latencies alike)."""
    out = []
    for same in zip(*rounds):
        med = lambda values: statistics.median(values) if None not in values else None  # noqa: E731
        out.append(
            Level(
                same[0].name,
                med([x.sentences_per_s for x in same]),
                med([x.p50_s for x in same]),
                med([x.p99_s for x in same]),
            )
        )
    return out


def table(levels: list[Level]) -> str:
    """A Markdown table: configuration, sentences/s, p50 and p99 latency (ms), and the speed against 1 client."""
    base = next((x.sentences_per_s for x in levels if x.name == "server, 1 client"), None)
    rows = ["| configuration | sentences/s | p50 latency | p99 latency | vs 1 client |", "|---|---:|---:|---:|---:|"]
    for x in levels:
        ms = lambda s: "" if s is None else f"{s * 1000:.0f} ms"  # noqa: E731
        ratio = f"{x.sentences_per_s / base:.2f}x" if base else ""
        rows.append(f"| {x.name} | {x.sentences_per_s:.1f} | {ms(x.p50_s)} | {ms(x.p99_s)} | {ratio} |")
    return "\n".join(rows)
