"""The server's models by pair and the routes between languages (transformer/serving/registry.py), on engines that
only name their pair: direct routes, pivots through English, /languages, and each refusal with LibreTranslate's
message; pivoted hypotheses (transformer/serving/routing.py's `compose`) against alignments composed by hand."""

from __future__ import annotations

import pytest

from transformer.decoding.streaming import Translation
from transformer.errors import UserError
from transformer.serving.registry import Model, Registry
from transformer.serving.requests import ApiError
from transformer.serving.routing import compose


class Named:
    def __init__(self, source: str, target: str) -> None:
        self.languages = (source, target)


def registry(*labels: str, pivot: str | None = "en") -> Registry:
    return Registry([Model(Named(*label.split(">")), (f"{label}.pt",)) for label in labels], pivot=pivot)


def test_routes_are_direct_when_a_model_serves_the_pair_else_through_the_pivot():
    served = registry("es>en", "en>es", "en>de", "fr>en")
    assert [m.pair for m in served.route("es", "en")] == [("es", "en")]
    assert [m.pair for m in served.route("es", "de")] == [("es", "en"), ("en", "de")]
    assert [m.pair for m in served.route("fr", "es")] == [("fr", "en"), ("en", "es")]
    assert served.languages() == [
        {"code": "es", "name": "Spanish", "targets": ["en", "de"]},
        {"code": "en", "name": "English", "targets": ["es", "de"]},
        {"code": "de", "name": "German", "targets": []},
        {"code": "fr", "name": "French", "targets": ["es", "en", "de"]},
    ]
    assert served.sources == ["es", "en", "fr"] and served.only is None


@pytest.mark.parametrize(
    "source, target, message",
    [
        ("pt", "en", "'pt' is not supported"),
        ("es", "zz", "'zz' is not supported"),
        (["es"], "en", "['es'] is not supported"),
        ("es", "es", "source and target are both es"),
        (
            "de",
            "es",
            "Spanish (es) is not available as a target language from German (de) (no model for that pair, "
            "nor de-en to pivot through en)",
        ),
        ("fr", "de", None),  # fr-en and en-de: pivoted
        ("de", "en", "English (en) is not available as a target language from German (de) (no model for that pair)"),
    ],
)
def test_refusals_name_what_is_missing(source, target, message):
    served = registry("es>en", "en>es", "en>de", "fr>en")
    if message is None:
        assert len(served.route(source, target)) == 2
        return
    with pytest.raises(ApiError) as caught:
        served.route(source, target)
    assert caught.value.status == 400 and message in caught.value.message


def test_without_a_pivot_only_direct_pairs_are_served():
    served = registry("es>en", "en>de", pivot="")
    assert served.languages()[0]["targets"] == ["en"]
    with pytest.raises(ApiError, match="pivoting is off"):
        served.route("es", "de")


@pytest.mark.parametrize(
    "labels, message",
    [
        (("es>en", "es>en"), "two models for es-en: es>en.pt and es>en.pt"),
        (("es>",), "its config names no language code"),
        (("e s>en",), "its config names no language code"),
        ((), "no model to serve"),
    ],
)
def test_bad_sets_of_models_are_refused_at_start(labels, message):
    with pytest.raises(UserError) as caught:
        registry(*labels)
    assert message in str(caught.value)


def test_a_pivoted_hypothesis_composes_the_alignments_and_multiplies_the_confidences():
    first = Translation("a b c", -1.0, -2.0, [1, 2, 3], alignment=[(0, 1), (1, 0), (2, 2)], confidence=0.5)
    second = Translation("x y", -3.0, -4.0, [4, 5], alignment=[(0, 0), (1, 1), (2, 1)], confidence=0.8)
    pivoted = compose(first, second)
    # source word s -> pivot word p (first), pivot word p -> target word t (second): (s, t) by hand
    assert pivoted.alignment == [(0, 1), (1, 0), (2, 1)]
    assert pivoted.confidence == pytest.approx(0.4) and (pivoted.text, pivoted.score, pivoted.tokens) == (
        "x y",
        -3.0,
        [4, 5],
    )
    assert compose(Translation("a", 0, 0, [1]), second).alignment is None  # one leg without alignments: none
