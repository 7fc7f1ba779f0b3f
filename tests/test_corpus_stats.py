"""Streamed scores (corpus_stats.py, evaluation.score_rows) against sacreBLEU's own corpus_score and PairedTest on
the whole lists: every metric and option, several references, chunks of every size."""

from __future__ import annotations

import logging

import pytest
import tiny_checkpoint
from sacrebleu.metrics import BLEU, CHRF, TER

from transformer.corpus_stats import CorpusStats, aligned_lines, paired_test
from transformer.errors import UserError
from transformer.evaluation import score_systems

# Mixed case, punctuation, hyphens, an empty hypothesis and random word salad, so that lowercasing, the
# tokenizers and TER's float statistics (edits / average reference length) all matter.
MIXED = [
    ("The cat sat on a mat.", "The cat sat on the mat.", "A cat sat on the mat!"),
    ("A well-known model of the art.", "A well-known state-of-the-art model.", "A famous state-of-the-art model."),
    ("It rains today, isn't it?", "It rains today, doesn't it?", "It is raining today, isn't it?"),
    ("", "Short.", "Short!"),
    (
        "Kosten-Nutzen Analyse für 2-3 Jahre.",
        "Kosten-Nutzen-Analyse für 2-3 Jahre.",
        "KOSTEN-NUTZEN-ANALYSE für zwei bis drei Jahre.",
    ),
]
SALAD = list(zip(*(tiny_checkpoint.sentences(30, seed) for seed in (11, 12, 13))))
HYPS, REF1, REF2 = (list(column) for column in zip(*(MIXED + SALAD)))  # 35 lines each
HYPS_B = [line.upper() if i % 3 == 0 else line for i, line in enumerate(REF2)]


def _metrics(name: str, lowercase: bool, tokenize: str | None):
    if name == "bleu":
        return BLEU(lowercase=lowercase, tokenize=tokenize)
    if name in ("chrf", "chrf++"):
        return CHRF(word_order=2 if name == "chrf++" else 0, lowercase=lowercase)
    return TER(case_sensitive=not lowercase)


OPTIONS = [(name, lowercase, None) for name in ("bleu", "chrf", "chrf++", "ter") for lowercase in (False, True)]
OPTIONS += [("bleu", False, "intl"), ("bleu", True, "char")]  # only BLEU takes a tokenizer


@pytest.mark.parametrize("name, lowercase, tokenize", OPTIONS)
@pytest.mark.parametrize("refs", [1, 2])
def test_streamed_totals_are_sacrebleus_corpus_score(name, lowercase, tokenize, refs):
    references = [REF1, REF2][:refs]
    expected = _metrics(name, lowercase, tokenize).corpus_score(HYPS, references)
    for chunk in (1, 2, 7, 35, 1000):  # one sentence per chunk, uneven chunks, exactly one, fewer lines than one
        stats = CorpusStats(_metrics(name, lowercase, tokenize))
        for start in range(0, len(HYPS), chunk):
            stats.add(HYPS[start : start + chunk], [ref[start : start + chunk] for ref in references])
            stats.clear_caches()
        score = stats.score()
        assert (score.score, str(score)) == (expected.score, str(expected))  # equal, not close: the same sums


@pytest.mark.parametrize(
    "options",
    [
        {"metrics": ["bleu", "chrf", "ter"]},
        {"metrics": ["bleu", "chrf"], "lowercase": True, "chrf_word_order": 2},
        {"metrics": ["bleu"], "tokenize": "intl"},
    ],
)
def test_score_systems_streams_give_the_whole_lists_scores(options):
    """Generators read in chunks of 4 lines give what sacreBLEU gives on the lists, signature included."""
    record = score_systems({"a": iter(HYPS)}, [iter(REF1), iter(REF2)], chunk_lines=4, **options)
    ours = record["systems"][0]["scores"]
    lowercase, order = options.get("lowercase", False), options.get("chrf_word_order", 0)
    whole = {
        "bleu": BLEU(tokenize=options.get("tokenize"), lowercase=lowercase),
        "chrf": CHRF(word_order=order, lowercase=lowercase),
        "ter": TER(),
    }
    for key in options["metrics"]:
        score = whole[key].corpus_score(HYPS, [REF1, REF2])
        assert ours[score.name] == {
            "score": score.score,
            "signature": str(whole[key].get_signature()),
            "detail": str(score),
        }
    assert record["sentences"] == len(HYPS) and record["references"] == 2


@pytest.mark.parametrize("test_type", ["bs", "ar"])
def test_paired_test_on_recorded_statistics_is_sacrebleus_on_the_text(test_type):
    from sacrebleu.significance import PairedTest

    metrics = {"bleu": BLEU(), "chrf": CHRF(word_order=2), "ter": TER()}
    systems = {}
    for name, hyps in (("base", HYPS), ("new", HYPS_B)):
        systems[name] = {key: CorpusStats(m, per_sentence=True) for key, m in metrics.items()}
        for start in range(0, len(hyps), 6):
            for stats in systems[name].values():
                stats.add(hyps[start : start + 6], [REF1[start : start + 6], REF2[start : start + 6]])
    n, signatures, table = paired_test(systems, test_type=test_type, n_samples=50)
    fresh = {"bleu": BLEU(), "chrf": CHRF(word_order=2), "ter": TER()}
    test = PairedTest([("base", HYPS), ("new", HYPS_B)], fresh, [REF1, REF2], test_type=test_type, n_samples=50)
    expected_signatures, expected = test()
    assert n == 50 and table.keys() == expected.keys() == {"System", "BLEU", "chrF2++", "TER"}
    for metric in ("BLEU", "chrF2++", "TER"):
        assert [vars(r) for r in table[metric]] == [vars(r) for r in expected[metric]]
        assert signatures[metric].format() == expected_signatures[metric].format()


def test_nothing_to_score_and_unaligned_streams_are_one_line_errors():
    with pytest.raises(UserError, match="^nothing to score: ref.txt has no lines$"):
        score_systems({"hyp.txt": iter([])}, [iter([])], reference_names=["ref.txt"])
    with pytest.raises(UserError, match="^b has 2 lines but a has 5; they must be line-aligned"):
        list(aligned_lines([iter("12345"), iter("12")], ["a", "b"]))
    assert list(aligned_lines([["x", "y"], ("1", "2")], ["a", "b"])) == [("x", "1"), ("y", "2")]


def test_a_tokenized_output_is_warned_about_once_not_once_per_chunk(caplog):
    """sacreBLEU warns when 100 or more hypotheses end in " ."; in chunks of 10, 150 such lines: one warning."""
    lines = [f"line {i} ." for i in range(150)]
    with caplog.at_level(logging.WARNING):
        score_systems({"tok.txt": lines}, [lines], metrics=["bleu"], chunk_lines=10)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "tok.txt: 150 lines end in a tokenized period" in warnings[0], warnings
