"""The translated files' store (transformer/serving/file_store.py) on a clock the test moves: a file is there until
its time is up and gone from then on, the oldest go first once the bytes pass the bound, a file larger than the
whole store is refused, and keys are the file's name behind a random id."""

from __future__ import annotations

import re

from transformer.serving.file_store import FileStore


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_file_is_kept_until_its_time_is_up_and_gone_from_then_on():
    clock = Clock()
    store = FileStore(max_bytes=100, ttl_s=10.0, clock=clock)
    key = store.put("a.txt", b"hello", "text/plain")
    clock.now = 109.99
    stored = store.get(key)
    assert (stored.name, stored.data, stored.media_type) == ("a.txt", b"hello", "text/plain")
    clock.now = 110.0
    assert store.get(key) is None and store.stored_bytes == 0


def test_past_the_bound_the_oldest_files_go_first():
    clock = Clock()
    store = FileStore(max_bytes=10, ttl_s=60.0, clock=clock)
    keys = []
    for n, size in enumerate([4, 4, 2]):
        clock.now += 1
        keys.append(store.put(f"{n}.txt", b"x" * size, "text/plain"))
    assert store.stored_bytes == 10 and all(store.get(k) for k in keys)
    clock.now += 1
    newest = store.put("3.txt", b"y" * 5, "text/plain")  # 15 bytes: the first two (8) must go, in age order
    assert [store.get(k) is not None for k in keys] == [False, False, True]
    assert store.get(newest).data == b"yyyyy" and store.stored_bytes == 7


def test_a_file_larger_than_the_whole_store_is_refused_and_nothing_is_dropped():
    store = FileStore(max_bytes=10, ttl_s=60.0, clock=Clock())
    kept = store.put("a.txt", b"12345", "text/plain")
    assert store.put("big.txt", b"x" * 11, "text/plain") is None
    assert store.get(kept).data == b"12345"
    assert store.put("exact.txt", b"x" * 10, "text/plain") is not None and store.get(kept) is None


def test_keys_are_a_random_id_then_the_name_and_unknown_keys_are_none():
    store = FileStore(max_bytes=100, ttl_s=60.0, clock=Clock())
    keys = {store.put("report.docx", b"d", "application/x") for _ in range(20)}
    assert len(keys) == 20 and all(re.fullmatch(r"[0-9a-f]{32}\.report\.docx", key) for key in keys)
    assert store.get("report.docx") is None and store.get("0" * 32 + ".report.docx") is None
    assert store.get("../../etc/passwd") is None
