"""data.case_augmentation (data/case_augmentation.py): the share of copies, both sides cased alike, the same copies
for a seed whatever the chunks, others for another seed; prepared data unchanged when off, the copies in the training
split and in SentencePiece's sample when on, validation never augmented."""

from __future__ import annotations

import dataclasses

import pytest
from test_corpus import hf_cache  # noqa: F401 (autouse)
from test_data_streaming import SYNTHETIC, cache_digests, synthetic_config

from transformer.config import ConfigError, from_dict
from transformer.data import case_augmentation as case
from transformer.data.case_augmentation import CASINGS, copies_between, title_case, with_case_copies
from transformer.data.prepare import prepare_data


def _pairs(n: int) -> tuple[list[str], list[str]]:
    """n pairs, each side naming its index, so a copy tells which pair it came from."""
    return [f"el rey número {i}, ¿dónde?" for i in range(n)], [f"the king's number {i}, where?" for i in range(n)]


def _chunked(pairs: tuple[list[str], list[str]], size: int):
    src, tgt = pairs
    return ((src[i : i + size], tgt[i : i + size]) for i in range(0, len(src), size))


def _copies(n: int, share: float, seed: int, size: int) -> list[tuple[str, str]]:
    """The copies that `with_case_copies` adds to n pairs read in chunks of `size` (each chunk's tail)."""
    out = []
    for (src, tgt), (orig, _) in zip(
        with_case_copies(_chunked(_pairs(n), size), share, seed), _chunked(_pairs(n), size)
    ):
        out += list(zip(src[len(orig) :], tgt[len(orig) :]))
    return out


def test_title_case_by_hand():
    assert title_case("el rey David, ¿qué haces?") == "El Rey David, ¿Qué Haces?"
    assert title_case("don't ángel o'brien") == "Don't Ángel O'brien"  # no capital after an apostrophe
    assert title_case("ÉL dijo") == "ÉL Dijo"  # the rest of a word is kept


@pytest.mark.parametrize("n, share", [(10_000, 0.2), (3_000, 0.05), (7_000, 1.0), (4_000, 0.0)])
def test_the_share_is_exact_over_whole_blocks(n, share):
    indices, casings = copies_between(0, n, share, seed=3)
    assert len(indices) == round(n * share) and len(set(indices.tolist())) == len(indices)
    assert indices.min(initial=0) >= 0 and indices.max(initial=0) < max(n, 1)
    if share:  # both casings, about half each
        assert abs((casings == 0).mean() - 0.5) < 0.1


def test_a_partial_block_keeps_the_share_roughly():
    assert abs(len(copies_between(0, 12_345, 0.2, seed=1)[0]) - 2469) <= 30  # 2,400 exact + ~69 of 345


def test_both_sides_are_cased_alike_and_originals_kept():
    src, tgt = _pairs(3_000)
    (out_src, out_tgt), *_ = with_case_copies(iter([(src, tgt)]), 0.3, seed=5)
    assert out_src[:3000] == src and out_tgt[:3000] == tgt and len(out_src) == len(out_tgt) == 3000 + 900
    kinds = set()
    for copy_src, copy_tgt in zip(out_src[3000:], out_tgt[3000:]):
        i = int(copy_tgt.split()[3].rstrip(","))  # the index, read from the copy itself
        matches = [k for k, casing in enumerate(CASINGS) if (casing(src[i]), casing(tgt[i])) == (copy_src, copy_tgt)]
        assert len(matches) == 1, (copy_src, copy_tgt)
        kinds.add(matches[0])
    assert kinds == {0, 1}
    assert f"THE KING'S NUMBER {i}, WHERE?" in out_tgt or f"The King's Number {i}, Where?" in out_tgt


def test_the_same_copies_for_a_seed_whatever_the_chunks_others_for_another_seed():
    first = _copies(5_000, 0.2, seed=1, size=50_000)
    assert sorted(_copies(5_000, 0.2, seed=1, size=333)) == sorted(first) == sorted(_copies(5_000, 0.2, 1, 1000))
    other = _copies(5_000, 0.2, seed=2, size=50_000)
    assert len(other) == len(first) and len(set(first) & set(other)) < len(first) // 2


def test_the_share_is_validated():
    with pytest.raises(ConfigError, match="case_augmentation"):
        from_dict({"data": {"case_augmentation": 1.5}})


def test_off_reads_exactly_the_corpus(tmp_path):
    config = synthetic_config(tmp_path)
    plain = list(case.stream_pairs(config.data.train, config.data, 700))
    assert list(case.training_pairs(config.data, seed=4, size=700)) == plain


def test_off_prepares_the_recorded_cache_and_on_adds_copies_to_train_and_to_sentencepiece(tmp_path):
    config = synthetic_config(tmp_path)
    off = prepare_data(config, progress=False)
    assert cache_digests(off.cache_paths) == SYNTHETIC  # the digests recorded before this setting existed
    data = dataclasses.replace(config.data, case_augmentation=0.5)
    on = prepare_data(dataclasses.replace(config, data=data), progress=False)
    assert set(on.cache_paths.values()).isdisjoint(off.cache_paths.values())
    assert len(off.splits["train"]) < len(on.splits["train"]) <= len(off.splits["train"]) + 2_000
    valid = on.splits["valid"]
    assert valid.src_text == off.splits["valid"].src_text and len(valid) == 300  # validation: not augmented
    upper = [piece for piece in on.tokenizer.pieces("src") if piece.strip("▁").isupper() and len(piece) > 2]
    assert upper and not [p for p in off.tokenizer.pieces("src") if p.strip("▁").isupper() and len(p) > 2]
    reseeded = dataclasses.replace(config, train=dataclasses.replace(config.train, seed=2), data=data)
    again = prepare_data(reseeded, progress=False)
    assert again.cache_paths["tokenizer"] == on.cache_paths["tokenizer"]  # the vocabulary does not follow the seed
    assert again.cache_paths["train"] != on.cache_paths["train"]
