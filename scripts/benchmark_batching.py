"""Benchmark token batching at WMT14 EN-DE scale: build time and padding efficiency (docs/benchmarks.md, Batching).

    python scripts/benchmark_batching.py [--pairs 4500000] [--max-tokens 25000]

Synthetic lengths: source ~ lognormal with mean ~27 tokens (clipped to [2, 256]), target = source x lognormal
noise (mean ratio ~1.06), as WMT14 EN-DE looks after BPE. Padding efficiency = real tokens / padded tokens, with
padded = B * (max S + max T) per batch. Collate is timed on the first 200k pairs with random ids.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from transformer.data.batching import TokenBatchSampler, collate
from transformer.data.prepare import EncodedSplit


def wmt_like_lengths(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = np.clip(np.rint(rng.lognormal(np.log(27) - 0.18, 0.6, n)), 2, 256).astype(np.int32)
    tgt = np.clip(np.rint(src * rng.lognormal(0.05, 0.15, n)), 2, 256).astype(np.int32)
    return src, tgt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4_500_000)
    parser.add_argument("--max-tokens", type=int, default=25_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    src, tgt = wmt_like_lengths(args.pairs, args.seed)
    print(f"{args.pairs:,} pairs: source mean {src.mean():.1f} tokens (max {src.max()}), target mean {tgt.mean():.1f}")
    start = time.perf_counter()
    sampler = TokenBatchSampler(src, tgt, max_tokens=args.max_tokens, seed=args.seed)
    build = time.perf_counter() - start
    start = time.perf_counter()
    n_batches = sum(1 for _ in sampler)
    iterate = time.perf_counter() - start
    print(
        f"build: {build:.2f} s for {sampler.n_batches:,} batches of <= {args.max_tokens:,} tokens "
        f"(mean {args.pairs / sampler.n_batches:.0f} pairs); one epoch of indices: {iterate:.2f} s"
    )
    print(f"padding efficiency (real / padded tokens, source + target): {sampler.padding_efficiency():.3f}")
    assert n_batches == len(sampler)

    n = min(200_000, args.pairs)  # collate on a slice, with random ids
    rng = np.random.default_rng(0)
    src_rows = [rng.integers(4, 37000, length, dtype=np.int32) for length in src[:n]]
    tgt_rows = [rng.integers(4, 37000, length - 1, dtype=np.int32) for length in tgt[:n]]  # pieces: length - 1
    split = EncodedSplit.from_lists(src_rows, tgt_rows)
    small = TokenBatchSampler(split.src_lengths, split.tgt_lengths, max_tokens=args.max_tokens, seed=args.seed)
    start = time.perf_counter()
    count = sum(collate(split, indices).n_tgt_tokens > 0 for indices in small)
    print(f"collate: {1000 * (time.perf_counter() - start) / count:.2f} ms per batch ({count} batches)")


if __name__ == "__main__":
    main()
