"""scripts/benchmark_prepare.py's measurements run end to end on a small synthetic corpus: preparation, a trainer's
start-up, and the start-up under torchrun with each rank's memory read from /proc (the figures themselves belong in
docs/benchmarks.md, not here)."""

from __future__ import annotations

import pytest

from transformer.benchmarks.data_path import ROOT, make_corpus, prepare_and_start, start_ranks


@pytest.mark.slow
def test_prepare_start_and_ranks_measure_on_a_small_corpus(tmp_path):
    corpus = make_corpus(3000, tmp_path / "corpus")
    measured = prepare_and_start(ROOT, corpus, tmp_path / "run", num_proc=1)
    assert measured["prepare"]["code"] == 0 and measured["trainer"]["code"] == 0
    prepared = measured["prepare"]
    assert 0 < prepared["main_gb"] < 2 and any("prepare: all of it" in stage for stage in prepared["stages"])
    ranks = start_ranks(ROOT, corpus, tmp_path / "run" / "cache", tmp_path / "ranks", num_proc=1, ranks=2)
    assert len(ranks["ranks"]) == 2  # the two ranks, not torchrun's agent or a rank's own children
    for rank in ranks["ranks"]:
        assert 0 < rank["private"] <= rank["pss"] <= rank["rss"] <= rank["peak"] < 4, rank
