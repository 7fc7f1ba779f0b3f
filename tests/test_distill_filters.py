"""The filters of a distilled corpus (training/distill_filters.py): hand-made pairs, each dropped by the filter named
for it and counted there (the first filter that applies), settings that turn each off, and the score histogram."""

from __future__ import annotations

import dataclasses
import json

import pytest

from transformer.config import DistillConfig
from transformer.errors import UserError
from transformer.training.distill_filters import FILTERS, drop_reason, filter_corpus, score_bin

SETTINGS = DistillConfig(min_length_ratio=0.5, max_length_ratio=2.0, min_score=-2.0)
PAIRS = [  # (source, teacher output, score per piece, the filter that drops it under SETTINGS)
    ("la casa roja", "the red house", -0.4, None),
    ("", "", 0.0, "empty"),  # an empty source line
    ("hola", "", -3.5, "empty"),  # the teacher gave up (and scored low: counted once, as empty)
    ("Jerusalén", "Jerusalén", -0.2, "copy"),
    ("uno dos tres cuatro", "one", -0.3, "length_ratio"),  # 1/4 < 0.5
    ("sí", "yes yes yes yes yes", -0.9, "length_ratio"),  # 5/1 > 2, also below no score bound
    ("a b", "x y z w", -0.5, None),  # 4/2 = 2: on the bound, kept
    ("buenos días", "good morning", -2.5, "score"),
    ("buenas noches", "good night", -2.0, None),  # on the bound, kept
]


@pytest.mark.parametrize("source, output, score, expected", PAIRS)
def test_each_pair_is_dropped_by_its_filter(source, output, score, expected):
    assert drop_reason(source, output, score, SETTINGS) == expected


def test_settings_turn_each_filter_off():
    off = DistillConfig(drop_empty=False, drop_copies=False, min_length_ratio=0, max_length_ratio=0, min_score=None)
    kept = [p for p in PAIRS if drop_reason(p[0], p[1], p[2], off) is None]
    assert [p[0] for p in PAIRS if p not in kept] == [""]  # an empty source is always dropped


def _write(path, pairs) -> None:
    path.write_text("".join(f"{s}\t{o}\tref\t{score:.4f}\n" for s, o, score, _ in pairs), encoding="utf-8")


def test_the_corpus_keeps_the_rows_the_filters_pass_and_counts_what_each_drops(tmp_path):
    _write(tmp_path / "teacher.tsv", PAIRS)
    report = filter_corpus(tmp_path / "teacher.tsv", tmp_path / "distilled.tsv", SETTINGS)
    expected = {name: sum(p[3] == name for p in PAIRS) for name in FILTERS}
    assert report["dropped"] == expected == {"empty": 2, "copy": 1, "length_ratio": 2, "score": 1}
    assert (report["pairs"], report["kept"]) == (9, 3)
    kept = (tmp_path / "distilled.tsv").read_text(encoding="utf-8").splitlines()
    assert kept == [
        "la casa roja\tthe red house\tref\t-0.4000",
        "a b\tx y z w\tref\t-0.5000",
        "buenas noches\tgood night\tref\t-2.0000",
    ]
    assert report["settings"]["min_score"] == -2.0 and json.dumps(report)  # what filters.json holds
    assert sum(report["score_histogram"].values()) == 9
    assert report["score_histogram"] == {"-3.5": 1, "-2.5": 1, "-2.0": 1, "-1.0": 1, "-0.5": 4, "0.0": 1}


def test_score_bins_are_half_units_from_minus_ten_to_zero():
    assert [score_bin(s) for s in (-0.0, -0.2, -0.5, -1.2, -37.0, 0.3)] == [
        "0.0",
        "-0.5",
        "-0.5",
        "-1.5",
        "-10.0",
        "0.0",
    ]


def test_a_row_of_another_shape_is_named(tmp_path):
    (tmp_path / "teacher.tsv").write_text("a\tb\tc\t-0.1\nonly two\tfields\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"teacher.tsv line 2 is not a row of the teacher's translation"):
        filter_corpus(tmp_path / "teacher.tsv", tmp_path / "distilled.tsv", dataclasses.replace(SETTINGS))
    assert not (tmp_path / "distilled.tsv").exists()  # written atomically: nothing on an error
