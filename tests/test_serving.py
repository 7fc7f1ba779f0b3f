"""transformer-serve end to end: the real server (`python -m transformer serve`) on a free loopback port, spoken to
over HTTP. LibreTranslate's API and the native one, answers checked against the Python API on the same checkpoint
(Translator.translate, the oracle), lists and empty strings, limits, concurrency, and a catalogue of malformed
requests that must each get a 4xx without harming the server. The options that need a server of their own (keys,
a full queue, an ensemble, SIGTERM with requests in flight) are tests/test_serving_options.py's.

The checkpoint is tests/tiny_checkpoint.py's small model trained for a few seconds to reverse word order, so its
outputs are peaked: decoding a line with other requests' lines (other padding) gives the same tokens.
"""

from __future__ import annotations

import json
import threading

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("multipart")

from serve_client import Served, call, multipart, raw  # noqa: E402
from tiny_checkpoint import build_trained, sentences  # noqa: E402

pytestmark = pytest.mark.slow
LIMITS = ["--max-lines", "8", "--max-chars", "200", "--max-body-bytes", "16384"]
LANGS = {"source": "xx", "target": "yy"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_trained(tmp_path_factory.mktemp("served"), norm_first=False, activation="relu")


@pytest.fixture(scope="module")
def oracle(checkpoint):
    from transformer import Translator

    return Translator.from_checkpoint(checkpoint)


@pytest.fixture(scope="module")
def server(checkpoint, tmp_path_factory):
    served = Served(["--checkpoint", str(checkpoint), *LIMITS], tmp_path_factory.mktemp("log") / "server.log")
    yield served
    assert served.stop() == 0


def post(server, path, body, **kwargs):
    return call(server.port, "POST", path, body, **kwargs)


# ------------------------------------------------------------------------------------------ LibreTranslate's API


def test_a_string_q_answers_a_string_as_the_python_api_translates_it(server, oracle):
    status, _, answer = post(server, "/translate", {"q": "the red cat sat", **LANGS})
    assert status == 200 and answer == {"translatedText": oracle.translate(["the red cat sat"])[0]}


def test_a_list_q_answers_a_list_in_order_empty_strings_included(server, oracle):
    q = ["the dog ran", "", "a small house", "   ", "then the cat sat"]
    status, _, answer = post(server, "/translate", {"q": q, **LANGS, "format": "text"})
    assert status == 200 and answer["translatedText"] == oracle.translate(q)
    assert answer["translatedText"][1] == "" and answer["translatedText"][3] == ""


def test_several_lines_in_one_q_are_translated_line_by_line(server, oracle):
    status, _, answer = post(server, "/translate", {"q": "the dog ran\r\na cat\n\nthe mat", **LANGS})
    expected = oracle.translate(["the dog ran", "a cat", "", "the mat"])
    assert status == 200 and answer["translatedText"] == "\n".join(expected)


@pytest.mark.parametrize("encoding", ["form", "multipart", "query"])
def test_forms_multipart_and_query_strings_are_read_as_libretranslate_reads_them(server, oracle, encoding):
    fields = {"q": "the old dog", **LANGS}
    if encoding == "form":
        body, headers = "q=the+old+dog&source=xx&target=yy", {"Content-Type": "application/x-www-form-urlencoded"}
        status, _, answer = post(server, "/translate", body, headers=headers)
    elif encoding == "multipart":
        headers = {"Content-Type": "multipart/form-data; boundary=b0undary"}
        status, _, answer = post(server, "/translate", multipart(fields), headers=headers)
    else:
        status, _, answer = post(server, "/translate?q=the%20old%20dog&source=xx&target=yy", b"")
    assert status == 200 and answer == {"translatedText": oracle.translate(["the old dog"])[0]}


def test_html_is_translated_as_a_document_as_the_python_api_translates_it(server, oracle):
    q = "<p class='a' title=\"x > y\">the red dog <b>sat on the mat</b></p><script>x<y</script>"
    status, _, answer = post(server, "/translate", {"q": q, **LANGS, "format": "html"})
    expected = oracle.translate_document(q, "html")  # one sentence, <b> placed by the word alignment
    assert status == 200 and answer["translatedText"] == expected
    assert expected.startswith("<p class='a' title=\"x > y\">") and expected.endswith("</p><script>x<y</script>")
    assert expected.count("<b>") == expected.count("</b>") == 1


def test_alternatives_and_auto_over_a_language_the_detector_does_not_know(server, oracle):
    status, _, answer = post(server, "/translate", {"q": ["the cat", "a dog ran"], **LANGS, "alternatives": 2})
    best = oracle.translate(["the cat", "a dog ran"], nbest=3)  # the checkpoint's beam, 4
    assert status == 200 and answer["translatedText"] == [hyps[0].text for hyps in best]
    assert answer["alternatives"] == [[h.text for h in hyps[1:]] for hyps in best]
    status, _, answer = post(server, "/translate", {"q": "the cat", "source": "auto", "target": "yy"})
    assert status == 400 and "the language identifier knows none of xx; give source" in answer["error"]


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_languages(server, method):
    status, _, answer = call(server.port, method, "/languages")
    assert status == 200 and answer == [
        {"code": "xx", "name": "xx", "targets": ["yy"]},
        {"code": "yy", "name": "yy", "targets": []},
    ]


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"source": "xx", "target": "yy"}, "Invalid request: missing q parameter"),
        ({"q": "", "source": "xx", "target": "yy"}, "Invalid request: missing q parameter"),
        ({"q": "a", "target": "yy"}, "Invalid request: missing source parameter"),
        ({"q": "a", "source": "xx"}, "Invalid request: missing target parameter"),
        ({"q": "a", "source": "de", "target": "yy"}, "'de' is not supported"),
        ({"q": "a", "source": "xx", "target": "xx"}, "source and target are both xx"),
        ({"q": "a", "source": "yy", "target": "xx"}, "xx (xx) is not available as a target language from yy (yy)"),
        ({"q": "a", "source": "xx", "target": "yy", "format": "xml"}, "'xml' format is not supported"),
        ({"q": 7, "source": "xx", "target": "yy"}, "q must be a string or a list of strings"),
        ({"q": ["a", 7], "source": "xx", "target": "yy"}, "q must be a string or a list of strings"),
    ],
)
def test_libretranslate_errors_are_a_400_with_an_error_field(server, fields, message):
    status, _, answer = post(server, "/translate", fields)
    assert status == 400 and message in answer["error"]


# --------------------------------------------------------------------------------------------- the native API


def test_native_nbest_scores_and_alignments_as_the_python_api_gives_them(server, oracle):
    q = ["the small dog ran home", "", "a cat"]
    status, _, answer = post(server, "/api/translate", {"q": q, "beam_size": 3, "nbest": 2, "alignment": True})
    expected = oracle.with_decode(beam_size=3).translate(q, nbest=2, alignment=True)
    assert status == 200 and len(answer["translations"]) == 3
    for got, hyps in zip(answer["translations"], expected):
        assert [h["text"] for h in got] == [h.text for h in hyps]
        assert [h["score"] for h in got] == pytest.approx([h.score for h in hyps], abs=1e-5)
        assert [h["log_prob"] for h in got] == pytest.approx([h.log_prob for h in hyps], abs=1e-5)
        assert [h["alignment"] for h in got] == [[list(link) for link in h.alignment] for h in hyps]
        assert [h["confidence"] for h in got] == pytest.approx([h.confidence for h in hyps], abs=1e-4)
    assert answer["confidence_threshold"] is None  # the checkpoint has no calibration (decoding/confidence.py)


def test_native_search_settings_change_the_search(server, oracle):
    body = {"q": "the red cat sat on the mat", "beam_size": 1, "max_len_b": 2, "max_len_a": 0}
    status, _, answer = post(server, "/api/translate", body)
    expected = oracle.with_decode(beam_size=1, max_len_b=2, max_len_a=0.0).translate(["the red cat sat on the mat"])
    assert status == 200 and answer["translations"][0][0]["text"] == expected[0]
    assert answer["translations"][0][0]["tokens"] <= 2


def test_attention_for_the_page(server, oracle):
    status, _, answer = post(server, "/api/attention", {"q": "the cat sat"})
    assert status == 200 and answer["translation"] == oracle.translate(["the cat sat"])[0]
    assert answer["columns"][-1] == "</s>" and answer["rows"][-1] == "</s>"
    assert len(answer["weights"]) == len(answer["rows"])
    assert all(sum(row) == pytest.approx(1.0, abs=1e-3) for row in answer["weights"])


# --------------------------------------------------------------------------------------- limits, health, metrics


@pytest.mark.parametrize(
    "q, status, message",
    [
        (["a"] * 9, 400, "request (9 lines) exceeds text limit (8 lines"),
        ("a\n" * 8 + "a", 400, "request (9 lines) exceeds text limit"),
        ("x" * 201, 400, "line 1 (201 characters) exceeds text limit (200 characters"),
        ("x" * 17000, 413, "Request body too large"),
    ],
)
def test_limits(server, q, status, message):
    got, _, answer = post(server, "/translate", {"q": q, **LANGS})
    assert got == status and message in answer["error"]


def test_health_and_metrics_count_the_work(server):
    _, _, before = call(server.port, "GET", "/metrics")
    post(server, "/translate", {"q": ["the cat", "a dog"], **LANGS})
    status, _, after = call(server.port, "GET", "/metrics")
    assert status == 200 and after["sentences"] == before["sentences"] + 2
    assert after["requests"] >= before["requests"] + 1 and after["source_tokens"] > before["source_tokens"]
    assert set(after["latency_ms"]) == {"p50", "p90", "p99"} and after["queue_lines"] == 0
    assert call(server.port, "GET", "/health")[:3:2] == (200, {"status": "ok", "queue_lines": 0})


def test_concurrent_requests_are_each_answered_with_their_own_lines(server, oracle):
    texts = sentences(40, seed=11)
    requests = [texts[i : i + 1 + i % 3] for i in range(0, 40, 3)]  # 1 to 3 lines each
    answers: dict[int, object] = {}

    def client(n):
        answers[n] = post(server, "/translate", {"q": requests[n], **LANGS})

    threads = [threading.Thread(target=client, args=(n,)) for n in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for n, lines in enumerate(requests):
        status, _, answer = answers[n]
        assert status == 200 and answer["translatedText"] == oracle.translate(lines)


# ------------------------------------------------------------------------------------------ malformed requests

JSON = {"Content-Type": "application/json"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
MULTI = {"Content-Type": "multipart/form-data; boundary=b0undary"}
MALFORMED = [  # (path, body, headers): each must get a 4xx with an `error` field
    ("/translate", b"{", JSON),
    ("/translate", b"[]", JSON),
    ("/translate", b"null", JSON),
    ("/translate", b'"q"', JSON),
    ("/translate", b"123", JSON),
    ("/translate", b'{"q": "\xff\xfe", "source": "xx", "target": "yy"}', JSON),
    ("/translate", b"\xff\xfe\x00\x01", JSON),
    ("/translate", b'{"q": "a\\ud800b", "source": "xx", "target": "yy"}', JSON),
    ("/translate", b'{"q": "a", "source": "xx", "target": "yy", "api_key": "\\udfff"}', JSON),
    ("/translate", b"[" * 3000 + b"]" * 3000, JSON),
    ("/translate", {"q": {"a": 1}, **LANGS}, None),
    ("/translate", {"q": [["nested"]], **LANGS}, None),
    ("/translate", {"q": None, **LANGS}, None),
    ("/translate", {"q": True, **LANGS}, None),
    ("/translate", {"q": "a", "source": ["xx"], "target": "yy"}, None),
    ("/translate", {"q": "a", **LANGS, "format": 5}, None),
    ("/translate", {"q": "a", **LANGS, "alternatives": -1}, None),
    ("/translate", {"q": "a", **LANGS, "alternatives": "many"}, None),
    ("/translate", b"q=%ff%fe&source=xx&target=yy", FORM),
    ("/translate", b"q=\xff&source=xx&target=yy", FORM),
    ("/translate", b"q=a&" * 100, FORM),
    ("/translate", multipart({"q": "a", **LANGS}), {"Content-Type": "multipart/form-data"}),
    ("/translate", multipart({"q": "a", **LANGS}, files={"file": "/etc/passwd"}), MULTI),
    ("/translate", multipart({"q": "a", **LANGS})[:40], MULTI),
    ("/translate", b"q=a", {"Content-Type": "text/plain"}),
    ("/translate", b"x" * 20000, JSON),
    ("/api/translate", {"q": "a", "file": "/etc/passwd"}, None),
    ("/api/translate", {"q": "a", "beam_size": 0}, None),
    ("/api/translate", {"q": "a", "beam_size": 1000}, None),
    ("/api/translate", {"q": "a", "beam_size": True}, None),
    ("/api/translate", {"q": "a", "beam_size": 2, "nbest": 3}, None),
    ("/api/translate", b'{"q": "a", "alpha": NaN}', JSON),
    ("/api/translate", {"q": "a", "alpha": "0.6"}, None),
    ("/api/translate", {"q": "a", "length_penalty": "wu"}, None),
    ("/api/translate", {"q": "a\nb"}, None),
    ("/api/translate", {"q": []}, None),
    ("/api/translate", {"q": "a", "alignment": "yes"}, None),
    ("/api/translate", {"q": "a", "alignment": True, "alignment_layer": 9}, None),
    ("/api/translate", {"q": ["a", "b"], "prefix": ["only one"]}, None),
    ("/api/translate", {"q": "a", "max_len_b": 10**9}, None),
    ("/api/attention", {"q": ["a", "b"]}, None),
    ("/api/attention", {"q": "a", "layer": 99}, None),
]


def test_malformed_requests_each_get_a_4xx_and_the_server_stays_up(server):
    assert len(MALFORMED) >= 30
    for path, body, headers in MALFORMED:
        status, _, answer = post(server, path, body, headers=headers)
        assert 400 <= status < 500 and isinstance(answer, dict) and answer.get("error"), (path, body, status, answer)
    assert call(server.port, "GET", "/translate")[0] == 405  # a route's wrong method
    assert call(server.port, "GET", "/../etc/passwd")[0] == 404
    truncated = b'POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"q"'
    for data in [
        b"GARBAGE\r\n\r\n",
        b"POST /translate HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        truncated,
        b"\x00\xff" * 50,
    ]:
        answer = raw(server.port, data)
        assert not answer or answer.startswith(b"HTTP/1.1 4"), answer[:80]
    assert call(server.port, "GET", "/health")[0] == 200
    assert post(server, "/translate", {"q": "the cat", **LANGS})[0] == 200


def test_the_body_limit_is_checked_before_the_body_is_read(server):
    head = b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 999999999\r\n\r\n"
    answer = raw(server.port, head, half_close=False)  # no body sent and the connection kept open: the 413 comes
    assert answer.startswith(b"HTTP/1.1 413") and b"Request body too large" in answer
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"].startswith("Request body too large")


def test_the_readme_curl_request(server, oracle):
    """README's curl example, sent as curl sends it, with the tiny model's language codes for es and en."""
    import shlex

    from serve_client import ROOT

    line = next(x for x in (ROOT / "README.md").read_text(encoding="utf-8").splitlines() if x.startswith("curl "))
    tokens = shlex.split(line)
    url, header, data = tokens[2], tokens[tokens.index("-H") + 1], tokens[tokens.index("-d") + 1]
    assert url == "localhost:5000/translate"
    fields = {**json.loads(data), **LANGS}
    name, value = header.split(": ")
    status, _, answer = post(server, "/translate", json.dumps(fields).encode(), headers={name: value})
    assert status == 200 and answer == {"translatedText": oracle.translate([fields["q"]])[0]}
