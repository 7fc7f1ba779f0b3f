"""A WMT-size synthetic parallel corpus from a small real one, to measure the data path at scale.

    python scripts/make_synthetic_corpus.py --src sample.en --tgt sample.de --pairs 4500000 --out runs/wmt-synth

Each output pair is a seed pair (drawn at random) in which about 15% of the source words are replaced by
synthetic "rare words" drawn from a Zipf distribution over a pool of 500k generated words, the same word put at the
proportional position on the target side (as names and numbers are copied in real corpora); one pair in five joins
two seed pairs, one in ten keeps only a prefix. The result has the seed's sentence lengths and style but millions
of distinct words, so SentencePiece and encoding work as hard as on WMT14 (4.5M pairs). Writes OUT/train.{src,tgt
suffix} and OUT/valid.* (the first 3,000 seed pairs, unchanged). Deterministic for a given --seed. Not for training
models: the synthetic words carry no meaning.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

SYLLABLES = [c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "au", "ei", "en", "er")]


def word_pool(n: int, rng: np.random.Generator) -> list[str]:
    """n distinct made-up words of 2 to 4 syllables, some capitalised (names)."""
    words: set[str] = set()
    while len(words) < n:
        k = rng.integers(2, 5, size=n)
        picks = rng.integers(0, len(SYLLABLES), size=(n, 4))
        for length, row in zip(k, picks):
            word = "".join(SYLLABLES[i] for i in row[:length])
            words.add(word.capitalize() if row[0] % 3 == 0 else word)
    ordered = sorted(words)[:n]  # sorted first: set order depends on the hash seed
    return [ordered[i] for i in rng.permutation(n)]


def synthesize(src: list[list[str]], tgt: list[list[str]], pairs: int, seed: int, out_src, out_tgt) -> None:
    rng = np.random.default_rng(seed)
    pool = word_pool(500_000, rng)
    chunk = 100_000
    for start in range(0, pairs, chunk):
        n = min(chunk, pairs - start)
        first, second = rng.integers(0, len(src), size=n), rng.integers(0, len(src), size=n)
        kind = rng.random(n)  # < 0.2: join two pairs; < 0.3: prefix only
        rare = (rng.zipf(1.3, size=(n, 8)) - 1) % len(pool)  # (n, 8) pool indices, heavy-tailed
        lines_src, lines_tgt = [], []
        for i in range(n):
            s, t = list(src[first[i]]), list(tgt[first[i]])
            if kind[i] < 0.2:
                s, t = s + src[second[i]], t + tgt[second[i]]
            elif kind[i] < 0.3 and len(s) > 6:
                keep = max(3, len(s) // 2)
                s, t = s[:keep], t[: max(3, len(t) * keep // len(s))]
            for j, r in enumerate(rare[i][: max(1, len(s) * 15 // 100)]):
                pos = (j * 7919 + int(r)) % len(s)
                s[pos] = t[min(len(t) - 1, pos * len(t) // len(s))] = pool[r]
            lines_src.append(" ".join(s))
            lines_tgt.append(" ".join(t))
        out_src.write("\n".join(lines_src) + "\n")
        out_tgt.write("\n".join(lines_tgt) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", required=True, help="seed source file, one sentence per line")
    parser.add_argument("--tgt", required=True, help="seed target file, line-aligned with --src")
    parser.add_argument("--pairs", type=int, default=4_500_000)
    parser.add_argument("--valid", type=int, default=3000, help="seed pairs copied unchanged to OUT/valid.*")
    parser.add_argument("--out", required=True, help="output folder (keep it out of git: runs/ is ignored)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    src_lines = Path(args.src).read_text("utf-8").splitlines()
    tgt_lines = Path(args.tgt).read_text("utf-8").splitlines()
    if len(src_lines) != len(tgt_lines) or not src_lines:
        raise SystemExit(f"error: {args.src} and {args.tgt} must be non-empty and line-aligned")
    keep = [i for i, (s, t) in enumerate(zip(src_lines, tgt_lines)) if s.split() and t.split()]
    src, tgt = [src_lines[i].split() for i in keep], [tgt_lines[i].split() for i in keep]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix_src, suffix_tgt = Path(args.src).suffix or ".src", Path(args.tgt).suffix or ".tgt"
    start = time.time()
    paths = out / f"train{suffix_src}", out / f"train{suffix_tgt}"
    with open(paths[0], "w", encoding="utf-8") as out_src, open(paths[1], "w", encoding="utf-8") as out_tgt:
        synthesize(src, tgt, args.pairs, args.seed, out_src, out_tgt)
    (out / f"valid{suffix_src}").write_text("\n".join(" ".join(s) for s in src[: args.valid]) + "\n", "utf-8")
    (out / f"valid{suffix_tgt}").write_text("\n".join(" ".join(t) for t in tgt[: args.valid]) + "\n", "utf-8")
    print(f"wrote {args.pairs:,} training pairs to {out} in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
