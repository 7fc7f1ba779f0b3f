"""The serving load benchmark's pieces (transformer/benchmarks/serve_load.py): the test sentences, the clients
against an in-process server over a scripted engine, the medians and the table (figures worked by hand)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from serve_client import ScriptedEngine, in_process  # noqa: E402

from transformer.benchmarks.serve_load import Level, book_sentences, median_levels, run_clients, table  # noqa: E402
from transformer.config import ServeConfig  # noqa: E402


def test_the_sentences_come_from_the_test_books_spread_evenly():
    sentences = book_sentences(5)
    assert len(sentences) == 5 and all(s.strip() for s in sentences) and len(set(sentences)) == 5


def test_clients_share_the_sentences_and_every_request_is_timed():
    engine = ScriptedEngine()
    with in_process(engine, ServeConfig(batch_wait_ms=1)) as port:
        level = run_clients(port, [f"s{i}" for i in range(12)], 3, ("es", "en"))
    assert level.name == "server, 3 clients" and level.sentences_per_s > 0 and 0 < level.p50_s <= level.p99_s
    assert sorted(line for call in engine.calls for line in call) == sorted(f"s{i}" for i in range(12))


def test_medians_and_the_table():
    rounds = [
        [Level("server, 1 client", 10.0, 0.1, 0.3), Level("x", 30.0)],
        [Level("server, 1 client", 12.0, 0.2, 0.5), Level("x", 40.0)],
        [Level("server, 1 client", 11.0, 0.3, 0.4), Level("x", 20.0)],
    ]
    levels = median_levels(rounds)
    assert levels == [Level("server, 1 client", 11.0, 0.2, 0.4), Level("x", 30.0)]
    assert table(levels).splitlines()[2:] == [
        "| server, 1 client | 11.0 | 200 ms | 400 ms | 1.00x |",
        "| x | 30.0 |  |  | 2.73x |",
    ]
