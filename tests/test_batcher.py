"""Batching across requests (transformer/serving/batcher.py), with a scripted decode function: what is decoded
together, what each job gets back, the turns that keep a long request from holding the decoder, deadlines and
cancelled jobs, the bounded queue, errors, and the drain on close."""

from __future__ import annotations

import math
import threading
import time

import pytest

from transformer.serving.batcher import Batcher, ExpiredError, Job


class Recorder:
    """decode(key, lines, controls) -> each line upper-cased with the key; the calls kept."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls: list[tuple[object, list[str], dict]] = []
        self.gate = gate

    def __call__(self, key, lines, controls):
        if self.gate is not None:
            self.gate.wait(10)
        self.calls.append((key, list(lines), controls))
        if any(line == "boom" for line in lines):
            raise RuntimeError("the model failed")
        return [f"{key}:{line.upper()}" for line in lines]


def job(lines, key="k", weights=None, controls=None, deadline=math.inf):
    box, done = {}, threading.Event()

    def deliver(value):
        box["value"] = value
        done.set()

    made = Job(list(lines), key, weights or [1] * len(lines), deliver, controls or {}, deadline=deadline)
    made.result = lambda: (done.wait(10), box["value"])[1]
    return made


def test_jobs_waiting_together_are_decoded_in_one_call_each_getting_its_own_lines_in_order():
    decode = Recorder(threading.Event())
    batcher = Batcher(decode, wait_s=0.2, max_tokens=1000, capacity=100)
    jobs = [job(["a", "b"]), job(["c"]), job(["d", "e", "f"])]
    for j in jobs:
        assert batcher.submit(j)
    batcher.start()
    decode.gate.set()
    assert [j.result() for j in jobs] == [["k:A", "k:B"], ["k:C"], ["k:D", "k:E", "k:F"]]
    assert [lines for _, lines, _ in decode.calls] == [["a", "b", "c", "d", "e", "f"]]
    batcher.close()


def test_different_settings_are_decoded_apart_and_controls_joined_per_group():
    decode = Recorder(threading.Event())
    batcher = Batcher(decode, wait_s=0.2, max_tokens=1000, capacity=100)
    jobs = [
        job(["a"], "x", controls={"prefix": ["p"]}),
        job(["b"], "y"),
        job(["c", "d"], "x", controls={"prefix": ["q", "r"]}),
    ]
    for j in jobs:
        batcher.submit(j)
    batcher.start()
    decode.gate.set()
    assert [j.result() for j in jobs] == [["x:A"], ["y:B"], ["x:C", "x:D"]]
    assert decode.calls == [("x", ["a", "c", "d"], {"prefix": ["p", "q", "r"]}), ("y", ["b"], {})]
    batcher.close()


def test_the_token_budget_ends_the_gathering_and_splits_what_waits():
    decode = Recorder(threading.Event())
    batcher = Batcher(decode, wait_s=5.0, max_tokens=10, capacity=100)  # only the budget ends it
    jobs = [job(["a"], weights=[6]), job(["b"], weights=[6]), job(["c"], weights=[3])]
    for j in jobs:
        batcher.submit(j)
    start = time.monotonic()
    batcher.start()
    decode.gate.set()
    assert [j.result() for j in jobs] == [["k:A"], ["k:B"], ["k:C"]]
    assert time.monotonic() - start < 4  # 15 tokens waited, past the budget: no 5 s gathering, before or between
    batcher.close()
    assert [lines for _, lines, _ in decode.calls] == [["a"], ["b", "c"]]  # 6 + 6 > 10: b waited for the next call


def test_the_queue_is_bounded_by_lines_admitted_and_frees_as_jobs_are_answered():
    gate = threading.Event()
    batcher = Batcher(Recorder(gate), wait_s=0.0, max_tokens=1000, capacity=3)
    batcher.start()
    first, second = job(["a", "b"]), job(["c"])
    assert batcher.submit(first) and batcher.submit(second)
    assert batcher.queued_lines == 3
    assert not batcher.submit(job(["d"]))  # full: refused, nothing queued
    gate.set()
    first.result(), second.result()
    assert batcher.queued_lines == 0 and batcher.submit(later := job(["d"]))
    assert later.result() == ["k:D"]
    batcher.close()


def test_a_job_larger_than_the_queue_is_admitted_alone():
    batcher = Batcher(Recorder(), wait_s=0.0, max_tokens=1000, capacity=2)
    big = job(["a", "b", "c"])
    assert batcher.submit(big)
    assert not batcher.submit(job(["d"]))
    batcher.start()
    assert big.result() == ["k:A", "k:B", "k:C"]
    batcher.close()


def test_an_error_goes_to_every_job_of_its_call_and_the_worker_goes_on():
    decode = Recorder(threading.Event())
    batcher = Batcher(decode, wait_s=0.2, max_tokens=1000, capacity=100)
    failing, beside = job(["boom"]), job(["x"])
    batcher.submit(failing), batcher.submit(beside)
    batcher.start()
    decode.gate.set()
    assert isinstance(failing.result(), RuntimeError) and isinstance(beside.result(), RuntimeError)
    assert batcher.submit(after := job(["y"])) and after.result() == ["k:Y"]
    assert batcher.queued_lines == 0
    batcher.close()


def test_close_decodes_what_was_admitted_then_refuses():
    batcher = Batcher(Recorder(), wait_s=10.0, max_tokens=1000, capacity=100)  # would gather for 10 s
    jobs = [job([str(i)]) for i in range(5)]
    for j in jobs:
        batcher.submit(j)
    batcher.start()
    batcher.close(timeout=5)
    assert [j.result() for j in jobs] == [[f"k:{i}"] for i in range(5)]
    assert not batcher.submit(job(["late"]))


@pytest.mark.parametrize("threads", [8])
def test_concurrent_submitters_each_get_their_own_lines(threads):
    batcher = Batcher(Recorder(), wait_s=0.01, max_tokens=50, capacity=1000)
    batcher.start()
    results = {}

    def client(n):
        mine = [job([f"t{n}l{i}" for i in range(n % 3 + 1)]) for _ in range(20)]
        for j in mine:
            assert batcher.submit(j)
        results[n] = [j.result() for j in mine]

    workers = [threading.Thread(target=client, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    for n, got in results.items():
        assert got == [[f"k:T{n}L{i}" for i in range(n % 3 + 1)]] * 20
    assert len(results) == threads
    batcher.close()


class Held(Recorder):
    """A Recorder whose first call waits for `release` (the test acts while it decodes)."""

    def __init__(self) -> None:
        super().__init__()
        self.decoding, self.release = threading.Event(), threading.Event()

    def __call__(self, key, lines, controls):
        if not self.calls:
            self.decoding.set()
            self.release.wait(10)
        return super().__call__(key, lines, controls)


def test_a_long_request_takes_whole_rounds_alone_and_shares_them_with_one_arriving_meanwhile():
    decode = Held()
    batcher = Batcher(decode, wait_s=0.0, max_tokens=4, capacity=100)
    long = job([f"l{i}" for i in range(9)], controls={"prefix": [f"p{i}" for i in range(9)]})
    batcher.submit(long)
    batcher.start()
    assert decode.decoding.wait(10)  # the long request's first round is being decoded
    short = job(["s"], controls={"prefix": ["q"]})
    batcher.submit(short)
    decode.release.set()
    assert short.result() == ["k:S"]
    assert long.result() == [f"k:L{i}" for i in range(9)]
    rounds = [lines for _, lines, _ in decode.calls]  # alone: the whole budget; with another: half each
    assert rounds == [["l0", "l1", "l2", "l3"], ["l4", "l5", "s"], ["l6", "l7", "l8"]]
    assert decode.calls[1][2] == {"prefix": ["p4", "p5", "q"]}  # each turn's controls sliced with its lines
    batcher.close()


def test_turns_go_round_in_order_within_the_rounds_budget():
    decode = Recorder()
    batcher = Batcher(decode, wait_s=0.0, max_tokens=6, capacity=100)  # shares of 6 // 3 = 2
    jobs = [job(["a0", "a1"], weights=[5, 1]), job(["b0"]), job(["c0"])]
    for j in jobs:
        batcher.submit(j)
    batcher.start()
    assert [j.result() for j in jobs] == [["k:A0", "k:A1"], ["k:B0"], ["k:C0"]]
    rounds = [lines for _, lines, _ in decode.calls]  # a0 (5, past its share: one line) + b0 fill the budget
    assert rounds == [["a0", "b0"], ["c0", "a1"]]  # c waited for the next round, and went first there
    batcher.close()


def test_a_job_past_its_deadline_or_cancelled_is_dropped_at_its_next_turn():
    decode = Held()
    batcher = Batcher(decode, wait_s=0.0, max_tokens=1, capacity=100)  # a line a round
    late = job(["x"], deadline=time.monotonic() - 1)
    assert batcher.submit(late)
    batcher.start()
    assert isinstance(late.result(), ExpiredError) and decode.calls == []  # never decoded
    long = job(["a", "b", "c"])
    batcher.submit(long)
    assert decode.decoding.wait(10)
    long.cancel()  # its request was answered (a timeout) while its first turn was decoded
    decode.release.set()
    assert isinstance(long.result(), ExpiredError)
    assert [lines for _, lines, _ in decode.calls] == [["a"]] and batcher.queued_lines == 0
    batcher.close()
