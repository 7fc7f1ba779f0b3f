"""The steering benchmark's constraints (benchmarks/steering.py): the rarest words of each reference."""

from __future__ import annotations

from transformer.benchmarks.steering import _repeats, rarest_words, word_counts


def test_rarest_words_by_training_frequency_in_sentence_order():
    counts = word_counts(["the king said to the king", "the queen said", "Haman said"])
    assert counts["the"] == 3 and counts["haman"] == 1 and counts["mordecai"] == 0
    picked = rarest_words(["Then the king said to Haman, “Hurry to Mordecai.”", "the king"], counts)
    assert picked == [["Then", "Hurry"], ["the", "king"]]  # unseen words first (0), ties by position
    assert rarest_words(["The queen said"], counts, most=1) == [["queen"]]  # counted lowercased


def test_repeats_counts_repeated_ngrams():
    assert _repeats([4, 5, 4, 5, 4], 2) == 2 and _repeats([4, 5, 6], 2) == 0
