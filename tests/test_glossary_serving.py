"""Glossaries in transformer-serve (serving/glossaries.py), over real HTTP on a loopback port: named glossaries
loaded at start and chosen per request in both APIs, terms given in a native request, their work counted against
the server's constraint limits (a 400 naming the limit), unknown names and bad terms refused, and answers checked
against the Python API with the same glossary (the oracle)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("multipart")

from serve_client import Served, call  # noqa: E402
from tiny_checkpoint import build_trained  # noqa: E402

from transformer.commands.cli import serve_main  # noqa: E402
from transformer.decoding.glossary import Glossary  # noqa: E402

pytestmark = pytest.mark.slow
LANGS = {"source": "xx", "target": "yy"}
LIMITS = ["--max-phrases", "2", "--max-phrase-pieces", "3", "--max-constraint-pieces", "4"]
BIBLE = "# two terms\ncat\tdog\nthe house\tmat\n"
NAMES = "red\tunder\nCat\tran\tcased\n"
LINES = ["the red cat sat", "a small house", "the house then", "the dog ran"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("served")
    checkpoint = build_trained(folder, norm_first=False, activation="relu")
    (folder / "bible.tsv").write_text(BIBLE, encoding="utf-8")
    (folder / "names.tsv").write_text(NAMES, encoding="utf-8")
    glossaries = ["--glossary", f"bible={folder / 'bible.tsv'}", "--glossary", f"names={folder / 'names.tsv'}"]
    served = Served(["--checkpoint", str(checkpoint), *glossaries, *LIMITS], folder / "server.log")
    from transformer import Translator

    yield served, Translator.from_checkpoint(checkpoint), folder
    assert served.stop() == 0
    assert "Traceback" not in served.log.read_text(encoding="utf-8")


def post(served, path, body):
    return call(served.port, "POST", path, body)


def texts(answer) -> list[str]:
    return [hyps[0]["text"] for hyps in answer["translations"]]


def test_libretranslate_chooses_a_named_glossary(setup):
    served, oracle, folder = setup
    status, _, answer = post(served, "/translate", {"q": LINES, **LANGS, "glossary": "bible"})
    expected = oracle.translate(LINES, glossary=Glossary.load(folder / "bible.tsv"))
    assert status == 200 and answer["translatedText"] == expected
    assert expected != oracle.translate(LINES) and expected[3] == oracle.translate(LINES)[3]  # line 4: no term
    status, _, answer = post(served, "/translate", {"q": "the red cat sat\nthe dog ran", **LANGS, "glossary": "bible"})
    assert status == 200 and answer["translatedText"] == "\n".join([expected[0], expected[3]])
    status, _, answer = post(served, "/translate", {"q": LINES, **LANGS, "glossary": ""})  # empty: none
    assert status == 200 and answer["translatedText"] == oracle.translate(LINES)


def test_native_chooses_a_named_glossary_and_reports_per_hypothesis(setup):
    served, oracle, folder = setup
    status, _, answer = post(served, "/api/translate", {"q": LINES, "glossary": "names", "nbest": 2, "beam_size": 4})
    expected = oracle.with_decode(beam_size=4).translate(LINES, nbest=2, glossary=Glossary.load(folder / "names.tsv"))
    assert status == 200
    assert [[h["text"] for h in hyps] for hyps in answer["translations"]] == [[h.text for h in e] for e in expected]
    assert all(h["relaxed"] == [] and h["unmet"] == [] for hyps in answer["translations"] for h in hyps)


def test_terms_in_the_request_with_constraints_and_a_named_glossary(setup):
    served, oracle, folder = setup
    terms = [["cat", "ran"], ["small", "the"]]
    body = {"q": LINES, "glossary_terms": terms, "glossary": "bible", "constraints": [["a"], [], [], []]}
    status, _, answer = post(served, "/api/translate", body)
    glossaries = [Glossary.from_pairs(terms), Glossary.load(folder / "bible.tsv")]
    from transformer.decoding.glossary import merged, term_targets

    constraints = [merged(c, term_targets(line, glossaries)) for c, line in zip(body["constraints"], LINES)]
    assert constraints == [["a", "ran"], ["the"], ["mat"], []]  # the request's "cat" term wins over bible's
    assert status == 200 and texts(answer) == oracle.translate(LINES, constraints=constraints)


def test_terms_that_cannot_fit_are_relaxed_and_reported(setup):
    served, oracle, _ = setup
    body = {"q": ["the cat", "a dog"], "glossary_terms": [["cat", "the a dog"]], "max_len_a": 0, "max_len_b": 2}
    status, _, answer = post(served, "/api/translate", body)
    assert status == 200, answer
    [cat], [dog] = answer["translations"]
    assert cat["relaxed"] == ["constraints"] and cat["unmet"] == ["the a dog"] and cat["text"]
    assert dog["relaxed"] == [] and dog["unmet"] == []


@pytest.mark.parametrize(
    "terms, status, flag",
    [
        ([["the", "a"], ["red", "dog"], ["cat", "ran"]], 400, "--max-phrases"),  # three terms on line 1
        ([["the", "a"], ["zebra", "dog"], ["lion", "ran"]], 200, None),  # only one is on a line: it alone counts
        ([["red", "the a dog ran"]], 400, "--max-phrase-pieces"),  # four pieces
        ([["zebra", "the a dog ran"]], 200, None),  # on no line: free
        ([["the", "a dog ran"], ["red", "under mat"]], 400, "--max-constraint-pieces"),  # 3 + 2 pieces on line 1
    ],
)
def test_the_terms_a_line_holds_count_against_the_constraint_limits(setup, terms, status, flag):
    served, _, _ = setup
    got, _, answer = post(
        served, "/api/translate", {"q": ["the red cat sat", "a small house"], "glossary_terms": terms}
    )
    assert got == status, answer
    if flag:
        assert flag in answer["error"] and "past the server's limit" in answer["error"]


@pytest.mark.parametrize(
    "path, body, message",
    [
        ("/translate", {"q": "the cat", **LANGS, "glossary": "psalms"}, "unknown glossary 'psalms'; the server's"),
        ("/api/translate", {"q": "the cat", "glossary": "psalms"}, "unknown glossary 'psalms'; the server's are"),
        ("/api/translate", {"q": "the cat", "glossary": 3}, "unknown glossary 3"),
        ("/api/translate", {"q": "the cat", "glossary_terms": "cat=dog"}, "give a list of [source, target] pairs"),
        ("/api/translate", {"q": "the cat", "glossary_terms": [["cat", ""]]}, "item 1: the target term is empty"),
        ("/api/translate", {"q": "the cat", "glossary_terms": [["cat", "a", "b"]]}, "give [source, target]"),
        (
            "/translate",
            {"q": "<p>the cat</p>", **LANGS, "format": "html", "glossary": "bible"},
            "applies to format text",
        ),
    ],
)
def test_unknown_glossaries_and_bad_terms_are_400(setup, path, body, message):
    served, _, _ = setup
    status, _, answer = post(served, path, body)
    assert status == 400 and message in answer["error"], answer


@pytest.mark.parametrize(
    "spec, message",
    [
        ("bible", "--glossary 'bible': write NAME=FILE"),
        ("a={missing}", "glossary file not found"),
        ("a={bad}", "bad.tsv line 1: 1 column(s)"),
    ],
)
def test_a_bad_glossary_at_start_is_one_line_and_exit_2(setup, tmp_path, capsys, spec, message):
    _, _, folder = setup
    (tmp_path / "bad.tsv").write_text("cat dog\n", encoding="utf-8")
    spec = spec.format(missing=tmp_path / "none.tsv", bad=tmp_path / "bad.tsv")
    code = serve_main(["--checkpoint", str(folder / "checkpoint.pt"), "--port", "0", "--glossary", spec])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err and "Traceback" not in err
