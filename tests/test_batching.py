"""Token batches: the max_tokens bound, coverage, determinism, epochs, DDP shards, mid-epoch resume, collate."""

from __future__ import annotations

import io
from itertools import islice

import numpy as np
import pytest
import torch

from transformer.data.batching import (
    LENGTH_BUCKETS,
    Batch,
    TokenBatchSampler,
    batch_plan,
    bucket_length,
    build_batches,
    collate,
)
from transformer.data.prepare import EncodedSplit
from transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer.errors import UserError


def wmt_like_lengths(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Source lengths ~ lognormal (mean ~27 tokens, max 256), targets a noisy multiple of them."""
    rng = np.random.default_rng(seed)
    src = np.clip(np.rint(rng.lognormal(np.log(27) - 0.18, 0.6, n)), 2, 256).astype(np.int32)
    tgt = np.clip(np.rint(src * rng.lognormal(0.05, 0.15, n)), 2, 256).astype(np.int32)
    return src, tgt


@pytest.fixture(scope="module")
def lengths() -> tuple[np.ndarray, np.ndarray]:
    return wmt_like_lengths(3000)


def epoch(sampler: TokenBatchSampler) -> list[list[int]]:
    return list(sampler)


@pytest.mark.parametrize("max_tokens", [300, 700, 5000])
def test_batches_respect_max_tokens(lengths, max_tokens):
    src, tgt = lengths
    src = src.copy()
    src[7] = 400  # longer than max_tokens by itself: alone in its batch
    batches = epoch(TokenBatchSampler(src, tgt, max_tokens=max_tokens, seed=1))
    for batch in batches:
        padded = len(batch) * max(src[batch].max(), tgt[batch].max())
        assert padded <= max_tokens or (len(batch) == 1 and padded > max_tokens and batch == [7])
    assert any(len(b) > 1 for b in batches) and ([7] in batches or max_tokens >= 2 * 400)


@pytest.mark.parametrize("shuffle", [True, False])
def test_every_example_exactly_once_per_epoch(lengths, shuffle):
    sampler = TokenBatchSampler(*lengths, max_tokens=2000, seed=1, shuffle=shuffle)
    for _ in range(2):
        indices = [i for batch in epoch(sampler) for i in batch]
        assert sorted(indices) == list(range(len(lengths[0])))
    assert sampler.epoch == 2 and sampler.position == 0


def test_same_seed_same_batches_and_other_seed_other_batches(lengths):
    make = lambda seed: epoch(TokenBatchSampler(*lengths, max_tokens=2000, seed=seed))
    assert make(3) == make(3)
    assert make(3) != make(4)


def test_epochs_change_the_order_not_the_batches(lengths):
    sampler = TokenBatchSampler(*lengths, max_tokens=2000, seed=1)
    first, second = epoch(sampler), epoch(sampler)
    assert first != second
    assert sorted(map(tuple, first)) == sorted(map(tuple, second))


def test_unshuffled_batches_go_from_short_to_long(lengths):
    src, tgt = lengths
    batches = epoch(TokenBatchSampler(src, tgt, max_tokens=2000, seed=1, shuffle=False))
    longest = [int(np.maximum(src[b], tgt[b]).max()) for b in batches]
    assert longest == sorted(longest)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ranks_get_disjoint_equal_shares(lengths, world_size):
    whole = TokenBatchSampler(*lengths, max_tokens=2000, seed=5)
    shards = [
        epoch(TokenBatchSampler(*lengths, max_tokens=2000, seed=5, rank=r, world_size=world_size))
        for r in range(world_size)
    ]
    assert all(len(s) == whole.n_batches // world_size for s in shards)
    seen = [tuple(b) for s in shards for b in s]
    assert len(seen) == len(set(seen)) == whole.n_batches - whole.n_batches % world_size
    assert set(seen) <= {tuple(whole.batch(b)) for b in range(whole.n_batches)}


@pytest.mark.parametrize("stop", [0, 1, 9, "end"])
def test_resume_mid_epoch_gives_the_same_remaining_batches(lengths, stop):
    make = lambda: TokenBatchSampler(*lengths, max_tokens=1500, seed=2, rank=1, world_size=2)
    uninterrupted = make()
    expected = epoch(uninterrupted) + epoch(uninterrupted)
    stop = len(uninterrupted) if stop == "end" else stop
    first = make()
    consumed = list(islice(iter(first), stop))
    buffer = io.BytesIO()
    torch.save({"sampler": first.state_dict()}, buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)["sampler"]
    assert all(type(v) is int for v in state.values())
    resumed = make()
    resumed.load_state_dict(state)
    assert consumed + epoch(resumed) + epoch(resumed) == expected  # "end": the first call yields nothing


def test_resume_continues_across_epochs(lengths):
    make = lambda: TokenBatchSampler(*lengths, max_tokens=1500, seed=2)
    uninterrupted = make()
    expected = [b for _ in range(3) for b in epoch(uninterrupted)]
    first = make()
    consumed = epoch(first) + list(islice(iter(first), 4))  # one epoch and 4 batches of the next
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    assert resumed.epoch == 1 and resumed.position == 4
    assert consumed + epoch(resumed) + epoch(resumed) == expected


def test_resume_refuses_other_settings(lengths):
    state = TokenBatchSampler(*lengths, max_tokens=1500, seed=2).state_dict()
    with pytest.raises(UserError, match="max_tokens=1500, now 1600"):
        TokenBatchSampler(*lengths, max_tokens=1600, seed=2).load_state_dict(state)


def test_too_few_batches_for_the_devices():
    with pytest.raises(UserError, match="for 4 devices"):
        TokenBatchSampler([3, 4], [3, 4], max_tokens=100, seed=1, rank=0, world_size=4)


def test_padding_is_small_on_wmt_like_lengths():
    src, tgt = wmt_like_lengths(50_000, seed=1)
    assert TokenBatchSampler(src, tgt, max_tokens=25000, seed=1).padding_efficiency() >= 0.9


def test_build_batches_cuts_greedily_in_length_order():
    order, bounds = build_batches(np.array([5, 1, 4, 2, 3]), np.array([1, 1, 1, 1, 1]), max_tokens=6, seed=0)
    batches = [order[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])]
    assert batches == [[1, 3], [4], [2], [0]]  # lengths [1, 2], [3], [4], [5]: 2*2 <= 6, 2*3 > 6


@pytest.mark.parametrize("longest", [50, 300, 1500])  # a 16-bit sort key, a 32-bit one, one past 65,535 pairs
def test_build_batches_orders_by_length_then_source_then_the_seeds_permutation(longest):
    """The order is a lexicographic sort by (max(S, T), S, place in the seed's permutation): np.lexsort as oracle;
    indices in 4 bytes (the peak memory of 36M pairs rests on it)."""
    rng = np.random.default_rng(3)
    src, tgt = rng.integers(1, longest, 70_000).astype(np.int32), rng.integers(1, longest, 70_000).astype(np.int32)
    order, bounds = build_batches(src, tgt, max_tokens=4 * longest, seed=9)
    place = np.argsort(np.random.default_rng(9).permutation(len(src)))  # where each pair lands in the shuffle
    assert np.array_equal(order, np.lexsort((place, src, np.maximum(src, tgt))))
    assert order.dtype == np.int32 and bounds[-1] == len(src)


def test_collate_pads_and_places_bos_and_eos():
    split = EncodedSplit.from_lists([[5, 6, EOS_ID], [7, EOS_ID], [8, 9, 10, 11, EOS_ID]], [[4], [4, 5, 6], []])
    batch = collate(split, [1, 0, 2])
    P, B, E = PAD_ID, BOS_ID, EOS_ID
    assert batch.src.tolist() == [[7, E, P, P, P], [5, 6, E, P, P], [8, 9, 10, 11, E]]
    assert batch.tgt_in.tolist() == [[B, 4, 5, 6], [B, 4, P, P], [B, P, P, P]]
    assert batch.tgt_out.tolist() == [[4, 5, 6, E], [4, E, P, P], [E, P, P, P]]
    assert batch.src.dtype == torch.long and batch.indices == [1, 0, 2] and batch.n_tgt_tokens == 7
    moved = batch.to("cpu")
    assert isinstance(moved, Batch) and moved.n_tgt_tokens == 7 and torch.equal(moved.tgt_out, batch.tgt_out)
    assert Batch(batch.src, batch.tgt_in, batch.tgt_out, batch.indices).n_tgt_tokens == 7


def test_collate_matches_a_plain_loop(lengths):
    rng = np.random.default_rng(0)
    src = [rng.integers(4, 50, n - 1).tolist() + [EOS_ID] for n in lengths[0][:200]]
    tgt = [rng.integers(4, 50, n - 1).tolist() for n in lengths[1][:200]]
    split = EncodedSplit.from_lists(src, tgt)
    sampler = TokenBatchSampler(split.src_lengths, split.tgt_lengths, max_tokens=400, seed=1)
    for indices in sampler:
        batch = collate(split, indices)
        for row, i in enumerate(indices):
            assert batch.src[row, : len(src[i])].tolist() == src[i] and (batch.src[row, len(src[i]) :] == 0).all()
            assert batch.tgt_in[row, : len(tgt[i]) + 1].tolist() == [BOS_ID] + tgt[i]
            assert batch.tgt_out[row, : len(tgt[i]) + 1].tolist() == tgt[i] + [EOS_ID]
        assert batch.src.shape[0] * max(batch.src.shape[1], batch.tgt_in.shape[1]) <= 400


# ---------------------------------------------------------------------------------------------- length buckets


def _random_split(src_len: np.ndarray, tgt_len: np.ndarray) -> EncodedSplit:
    """Random ids with these model lengths: src_len counts the EOS, tgt_len the pieces + 1."""
    rng = np.random.default_rng(0)
    src = [rng.integers(4, 50, n - 1).tolist() + [EOS_ID] for n in src_len]
    tgt = [rng.integers(4, 50, n - 1).tolist() for n in tgt_len]
    return EncodedSplit.from_lists(src, tgt)


@pytest.mark.parametrize(
    "length, bucket", [(1, 8), (8, 8), (9, 16), (25, 32), (33, 48), (49, 64), (97, 128), (257, 384), (7000, 7168)]
)
def test_bucket_length(length, bucket):
    assert bucket_length(length) == bucket  # 8, 16, 24, then 1 and 1.5 times powers of two; past 6144, x 1024


@pytest.mark.parametrize("max_tokens", [700, 4096])
def test_bucketed_batches_come_in_a_few_shapes(lengths, max_tokens):
    src_len, tgt_len = lengths
    split = _random_split(src_len, tgt_len)
    sampler = TokenBatchSampler(src_len, tgt_len, max_tokens=max_tokens, seed=1, buckets=True)
    batches = epoch(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(src_len)))  # each pair once
    shapes, partial = set(), []
    for indices in batches:
        batch = collate(split, indices, bucket=True)
        rows, length = batch.src.shape
        assert batch.tgt_in.shape == batch.tgt_out.shape == (rows, length) and length in LENGTH_BUCKETS
        assert max(src_len[indices].max(), tgt_len[indices].max()) <= length  # padded, never cut
        assert rows <= max(1, max_tokens // length)  # the token bound holds for the padded length
        if rows != max(1, max_tokens // length):
            partial.append(length)
        shapes.add((rows, length))
    assert len(partial) == len(set(partial))  # full batches, but the last one of each bucket
    n_buckets = len({length for _, length in shapes})
    assert len(shapes) <= 2 * n_buckets < 30  # a full and a last batch per bucket: few shapes to compile
    assert sampler.state_dict()["buckets"] == 1


def test_bucketed_collate_only_adds_padding(lengths):
    src_len, tgt_len = lengths
    split = _random_split(src_len, tgt_len)
    indices = [3, 17, 29]
    plain, padded = collate(split, indices), collate(split, indices, bucket=True)
    S, T = plain.src.size(1), plain.tgt_in.size(1)
    for name in ("src", "tgt_in", "tgt_out"):
        width = S if name == "src" else T
        assert torch.equal(getattr(padded, name)[:, :width], getattr(plain, name))
        assert (getattr(padded, name)[:, width:] == PAD_ID).all()
    assert padded.n_tgt_tokens == plain.n_tgt_tokens
    L = padded.tgt_out.size(1)
    assert torch.equal(padded.tgt_out.flatten()[padded.tgt_index], plain.tgt_out.flatten()[plain.tgt_index])
    assert padded.tgt_index.tolist() == [(i // T) * L + i % T for i in plain.tgt_index.tolist()]


def test_resume_refuses_other_bucketing(lengths):
    src, tgt = lengths
    state = TokenBatchSampler(src, tgt, max_tokens=700, seed=1, buckets=True).state_dict()
    with pytest.raises(UserError, match="buckets"):
        TokenBatchSampler(src, tgt, max_tokens=700, seed=1).load_state_dict(state)


@pytest.mark.parametrize("buckets", [False, True])
def test_the_batch_plan_is_kept_in_the_cache_and_read_back_memory_mapped(lengths, buckets, tmp_path):
    src, tgt = lengths
    expected = build_batches(src, tgt, max_tokens=300, seed=5, buckets=buckets)
    first = batch_plan(tmp_path, src, tgt, max_tokens=300, seed=5, buckets=buckets)
    again = batch_plan(tmp_path, src, tgt[::-1], max_tokens=300, seed=5, buckets=buckets)  # read, not rebuilt
    assert isinstance(again[0], np.memmap) and sorted(p.name for p in tmp_path.iterdir()) == [
        f"batches-300-5-{'buckets' if buckets else 'sorted'}-{part}.npy" for part in ("bounds", "order")
    ]
    for plan in (first, again):
        assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(plan, expected))
    other = batch_plan(tmp_path, src, tgt, max_tokens=300, seed=6, buckets=buckets)  # another seed, another plan
    assert not np.array_equal(other[0], expected[0])
    planned = TokenBatchSampler(src, tgt, max_tokens=300, seed=5, buckets=buckets, plan=again)
    built = TokenBatchSampler(src, tgt, max_tokens=300, seed=5, buckets=buckets)
    assert list(islice(planned, 50)) == list(islice(built, 50))


def test_a_cache_it_cannot_write_to_plans_in_memory(lengths, tmp_path):
    src, tgt = lengths
    plan = batch_plan(tmp_path / "missing", src, tgt, max_tokens=300, seed=5)  # (as a read-only folder would)
    assert np.array_equal(plan[0], build_batches(src, tgt, max_tokens=300, seed=5)[0]) and not list(tmp_path.iterdir())
