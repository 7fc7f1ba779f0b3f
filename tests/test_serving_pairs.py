"""A server of several models end to end: the real `transformer-serve --model ... --model ...` on a free loopback
port with tests/tiny_pairs.py's three tiny models (es-en, en-es, en-yy), spoken to over HTTP and by LibreTranslate's
own Python client, unchanged. Every answer is checked against the Python API on the same checkpoints (the oracle):
direct pairs, a pair pivoted through English (two translations: alternatives, html, files, glossary terms on the
last leg, the native API's route and confidences), detection and `source: auto`, concurrent requests on two pairs,
the refusals, start-up errors, memory in the start-up lines and /metrics, and SIGTERM with two models busy."""

from __future__ import annotations

import threading
import time

import pytest
import torch

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("multipart")
pytest.importorskip("py3langid")

from serve_client import Served, call, download, upload  # noqa: E402
from tiny_pairs import build_pairs, english, spanish  # noqa: E402

from transformer.commands.cli import serve_main  # noqa: E402
from transformer.decoding.glossary import TermTarget  # noqa: E402
from transformer.serving.routing import compose  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    return build_pairs(tmp_path_factory.mktemp("pairs"))


@pytest.fixture(scope="module")
def oracle(pairs):
    from transformer import Translator

    return {label: Translator.from_checkpoint(path) for label, path in pairs.items()}


@pytest.fixture(scope="module")
def server(pairs, tmp_path_factory):
    folder = tmp_path_factory.mktemp("log")
    (folder / "terms.tsv").write_text("gato\tdog\n", encoding="utf-8")  # es -> yy: "dog" in the yy output
    models = [arg for label in ("es-en", "en-es", "en-yy") for arg in ("--model", str(pairs[label]))]
    served = Served([*models, "--glossary", f"terms={folder / 'terms.tsv'}"], folder / "server.log")
    yield served
    assert served.stop() == 0
    assert "Traceback" not in served.log.read_text(encoding="utf-8")


def post(server, path, body, **kwargs):
    return call(server.port, "POST", path, body, **kwargs)


def pivoted(oracle, lines: list[str]) -> list[str]:
    return oracle["en-yy"].translate(oracle["es-en"].translate(lines))


def test_languages_list_every_pair_direct_and_pivoted(server):
    assert call(server.port, "GET", "/languages")[2] == [
        {"code": "es", "name": "Spanish", "targets": ["en", "yy"]},
        {"code": "en", "name": "English", "targets": ["es", "yy"]},
        {"code": "yy", "name": "yy", "targets": []},
    ]


def test_each_direct_pair_answers_as_its_own_model(server, oracle):
    es = spanish(6, seed=11)
    en = [english(line) for line in es]
    status, _, answer = post(server, "/translate", {"q": es, "source": "es", "target": "en"})
    assert status == 200 and answer["translatedText"] == oracle["es-en"].translate(es)
    status, _, answer = post(server, "/translate", {"q": en[0], "source": "en", "target": "es"})
    assert status == 200 and answer["translatedText"] == oracle["en-es"].translate([en[0]])[0]


def test_a_pivoted_pair_is_two_translations_and_the_native_api_names_the_route(server, oracle):
    es = spanish(5, seed=12)
    status, _, answer = post(server, "/translate", {"q": es, "source": "es", "target": "yy", "alternatives": 2})
    middle = oracle["es-en"].translate(es)
    best = oracle["en-yy"].translate(middle, nbest=3)
    assert status == 200 and answer["translatedText"] == [hyps[0].text for hyps in best]
    assert answer["alternatives"] == [[h.text for h in hyps[1:]] for hyps in best]
    body = {"q": es[:2], "source": "es", "target": "yy", "alignment": True}
    status, _, answer = post(server, "/api/translate", body)
    firsts = oracle["es-en"].translate(es[:2], nbest=1, alignment=True)
    seconds = oracle["en-yy"].translate([hyps[0].text for hyps in firsts], nbest=1, alignment=True)
    assert status == 200 and answer["route"] == ["es", "en", "yy"] and answer["confidence_threshold"] is None
    for got, first, second in zip(answer["translations"], firsts, seconds):
        expected = compose(first[0], second[0])
        assert got[0]["text"] == expected.text and got[0]["alignment"] == [list(link) for link in expected.alignment]
        assert got[0]["confidence"] == pytest.approx(first[0].confidence * second[0].confidence, abs=1e-4)
    assert post(server, "/api/translate", {"q": "el gato", "source": "es", "target": "en"})[2]["route"] == ["es", "en"]


def test_html_and_files_go_through_the_pivot(server, oracle):
    status, _, answer = post(
        server, "/translate", {"q": "<p>el perro <b>come pan</b></p>", "source": "es", "target": "yy", "format": "html"}
    )
    plain = pivoted(oracle, ["el perro come pan"])[0]
    text = answer["translatedText"]
    assert status == 200 and text.startswith("<p>") and text.endswith("</p>") and text.count("<b>") == 1
    assert text.replace("<b>", "").replace("</b>", "")[3:-4].split() == plain.split()
    lines = spanish(4, seed=13)
    text = "\n\n".join(lines) + "\n"  # a paragraph a line: one sentence each
    status, _, answer = upload(server.port, "cuento.txt", text, {"source": "auto", "target": "yy"})
    assert status == 200
    status, _, data = download(server.port, answer["translatedFileUrl"])
    assert status == 200 and data.decode("utf-8") == "\n\n".join(pivoted(oracle, lines)) + "\n"


def test_glossary_terms_constrain_the_leg_whose_target_they_name(server, oracle):
    line = "el gato bebe agua"
    status, _, answer = post(server, "/translate", {"q": line, "source": "es", "target": "yy", "glossary": "terms"})
    middle = oracle["es-en"].translate([line])
    expected = oracle["en-yy"].translate(middle, constraints=[[TermTarget("dog")]])[0]
    assert status == 200 and answer["translatedText"] == expected and "dog" in expected.split()


def test_detect_and_auto_choose_the_model_of_the_texts_language(server, oracle):
    status, _, ranked = post(server, "/detect", {"q": "el perro come pan y bebe agua"})
    assert status == 200 and [r["language"] for r in ranked] == ["es", "en"]
    assert post(server, "/detect", {"q": "the dog eats bread and drinks water"})[2][0]["language"] == "en"
    line = "el perro come pan y bebe agua"
    status, _, answer = post(server, "/translate", {"q": line, "source": "auto", "target": "en"})
    assert status == 200 and answer["translatedText"] == oracle["es-en"].translate([line])[0]
    assert answer["detectedLanguage"]["language"] == "es"
    status, _, answer = post(server, "/api/translate", {"q": line, "source": "auto", "target": "yy"})
    assert status == 200 and answer["route"] == ["es", "en", "yy"] and answer["detectedLanguage"]["language"] == "es"


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"source": "de", "target": "en"}, "'de' is not supported"),
        ({"source": "es", "target": "fr"}, "'fr' is not supported"),
        ({"source": "en", "target": "en"}, "source and target are both en"),
        ({"source": "yy", "target": "es"}, "Spanish (es) is not available as a target language from yy (yy)"),
        ({"source": "auto", "target": "en", "q": "Das Parlament verweigerte heute den Antrag."}, "in none of"),
    ],
)
def test_refusals_are_libretranslate_shaped_400s(server, fields, message):
    status, _, answer = post(server, "/translate", {"q": "el perro", **fields})
    assert status == 400 and message in answer["error"]


def test_the_unchanged_libretranslate_client(server, oracle):
    libretranslatepy = pytest.importorskip("libretranslatepy")
    client = libretranslatepy.LibreTranslateAPI(f"http://127.0.0.1:{server.port}/")
    assert [lang["code"] for lang in client.languages()] == ["es", "en", "yy"]
    line = "el gato come pan"
    assert client.translate(line, "es", "en") == oracle["es-en"].translate([line])[0]
    assert client.translate(english(line), "en", "es") == oracle["en-es"].translate([english(line)])[0]
    assert client.translate(line, "es", "yy") == pivoted(oracle, [line])[0]
    assert client.translate(line, "auto", "en") == oracle["es-en"].translate([line])[0]
    assert client.detect("el perro come pan y bebe agua")[0]["language"] == "es"


def test_concurrent_requests_on_two_pairs_are_each_answered_with_their_own_model(server, oracle):
    es = spanish(24, seed=14)
    jobs = [
        ("es", "en", es[n : n + 2]) if n % 2 == 0 else ("en", "es", [english(x) for x in es[n : n + 2]])
        for n in range(0, 24, 2)
    ]
    answers: dict[int, object] = {}

    def client(n):
        source, target, q = jobs[n]
        answers[n] = post(server, "/translate", {"q": q, "source": source, "target": target})

    threads = [threading.Thread(target=client, args=(n,)) for n in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for n, (source, target, q) in enumerate(jobs):
        assert answers[n][0] == 200 and answers[n][2]["translatedText"] == oracle[f"{source}-{target}"].translate(q)


def test_memory_per_model_in_the_start_up_lines_and_metrics(server, oracle):
    metrics = call(server.port, "GET", "/metrics")[2]
    for model in metrics["models"]:
        translator = oracle[model["pair"]]
        tensors = [*translator.model.parameters(), *translator.model.buffers()]
        assert model["memory_bytes"] == sum(t.numel() * t.element_size() for t in tensors)
    log = server.log.read_text(encoding="utf-8")
    assert "model es-en:" in log and "MiB of parameters and buffers" in log and "through en: es-yy" in log


def test_start_up_refuses_a_bad_set_of_models_naming_it(pairs, tmp_path, capsys):
    nameless = torch.load(pairs["es-en"], weights_only=True)
    nameless["config"]["data"]["src_lang"] = ""
    torch.save(nameless, tmp_path / "nameless.pt")
    (tmp_path / "broken.pt").write_bytes(b"not a checkpoint")
    cases = [
        (["--model", str(pairs["es-en"]), "--model", str(pairs["es-en"])], "two models for es-en"),
        (
            ["--model", str(pairs["es-en"]), "--model", str(tmp_path / "broken.pt")],
            "--model " + str(tmp_path / "broken.pt"),
        ),
        (["--model", str(tmp_path / "nameless.pt")], "its config names no language code"),
        (["--port", "0"], "transformer-serve needs a model"),
    ]
    for argv, message in cases:
        assert serve_main([*argv, "--port", "0"]) == 2
        err = capsys.readouterr().err
        assert message in err and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err


def test_sigterm_with_requests_in_flight_on_two_models_answers_them_all(pairs, oracle, tmp_path):
    args = [arg for label in ("es-en", "en-es", "en-yy") for arg in ("--model", str(pairs[label]))]
    served = Served([*args, "--batch-wait-ms", "1500", "--batch-tokens", "100000"], tmp_path / "log")
    es = spanish(9, seed=15)
    routes = [("es", "en"), ("en", "es"), ("es", "yy")]  # the third through the pivot: its second leg after SIGTERM
    jobs = [(*routes[n % 3], line if n % 3 != 1 else english(line)) for n, line in enumerate(es)]
    answers: dict[int, object] = {}

    def client(n: int) -> None:
        source, target, line = jobs[n]
        answers[n] = post(served, "/translate", {"q": line, "source": source, "target": target})

    threads = [threading.Thread(target=client, args=(n,)) for n in range(len(jobs))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while call(served.port, "GET", "/metrics")[2]["queue_lines"] < len(jobs) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert served.stop() == 0
    for t in threads:
        t.join(30)
    for n, (source, target, line) in enumerate(jobs):
        expected = pivoted(oracle, [line])[0] if target == "yy" else oracle[f"{source}-{target}"].translate([line])[0]
        assert answers[n][::2] == (200, {"translatedText": expected})
    log = served.log.read_text(encoding="utf-8")
    assert "every accepted request was answered" in log and "Traceback" not in log
