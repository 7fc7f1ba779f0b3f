"""cleaning.py: the length filters, duplicates and copies, chunk by chunk, against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from transformer.config import DataConfig
from transformer.data.cleaning import PairFilter, SeenHashes, length_reasons, pair_hashes


def test_seen_hashes_equal_a_set_across_chunks():
    rng = np.random.default_rng(1)
    seen, brute = SeenHashes(), set()
    for size in rng.integers(0, 300, size=60):
        hashes = rng.integers(0, 400, size=size).astype(np.uint64)  # many repeats, within and across chunks
        expected = []
        for h in hashes.tolist():
            expected.append(h not in brute)
            brute.add(h)
        assert seen.first_seen(hashes).tolist() == expected
    assert len(seen) == len(brute) and len(seen.levels) <= 10
    assert all(np.all(np.diff(level.astype(np.int64)) > 0) for level in seen.levels)  # sorted, no repeats


def test_pair_hashes_tell_the_sides_apart():
    hashes = pair_hashes(["a b", "a", "a", "a b"], ["c", "b c", "b c", "c"])
    assert hashes.dtype == np.uint64 and len(set(hashes.tolist())) == 2 and hashes[0] == hashes[3]
    assert hashes[1] == hashes[2] and hashes[0] != hashes[1]  # ("a b", "c") and ("a", "b c") differ


@pytest.mark.parametrize("ratio", [0.0, 1.5])
def test_length_reasons_count_each_pair_once(ratio):
    data = DataConfig(max_tokens_per_sentence=10, max_length_ratio=ratio)
    src = np.array([1, 5, 11, 3, 2, 12, 4])
    tgt = np.array([5, 1, 3, 11, 6, 1, 5])
    masks = length_reasons(src, tgt, data)
    assert masks["empty"].tolist() == [True, True, False, False, False, True, False]
    assert masks["too_long"].tolist() == [False, False, True, True, False, False, False]
    expected = [False, False, False, False, ratio > 0, False, False]  # 6 / 2 = 3 > 1.5; 5 / 4 = 1.25 is kept
    assert masks["length_ratio"].tolist() == expected


def test_the_filter_drops_copies_and_duplicates_after_the_length_reasons():
    data = DataConfig(max_tokens_per_sentence=10, max_length_ratio=0, drop_copies=True, drop_duplicates=True)
    pairs = PairFilter(data)
    src, tgt = ["a", "a", "b", "b", "", "c"], ["x", "x", "b", "b", "", "y"]
    lengths = np.array([2, 2, 2, 2, 1, 2])
    same = np.array([s == t for s, t in zip(src, tgt)])
    keep = pairs.keep(lengths, lengths, same, pair_hashes(src, tgt))
    assert keep.tolist() == [True, False, False, False, False, True]
    again = pairs.keep(lengths[:1], lengths[:1], same[:1], pair_hashes(src[:1], tgt[:1]))  # the next chunk
    assert again.tolist() == [False]
    assert pairs.dropped == {"empty": 1, "too_long": 0, "length_ratio": 0, "source_is_target": 2, "duplicate": 2}
