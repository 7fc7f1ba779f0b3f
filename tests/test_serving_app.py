"""The application (transformer/serving/app.py) over a scripted engine, served in-process on a loopback port: the
bounded queue's 503 with Retry-After, a model error answered 500 while the server stays up, and requests from
concurrent clients decoded together, each answered with its own lines."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from serve_client import ScriptedEngine, call, in_process  # noqa: E402

from transformer.config import DecodeConfig, ServeConfig  # noqa: E402
from transformer.decoding.streaming import Translation  # noqa: E402

LANGS = {"source": "es", "target": "en"}


def test_a_full_queue_answers_503_with_retry_after_and_the_admitted_requests_are_answered():
    engine = ScriptedEngine()
    engine.gate.clear()  # the first batch is held in the model, the rest waits in the queue
    serve = ServeConfig(queue_lines=4, batch_wait_ms=0, retry_after_s=3)
    with in_process(engine, serve) as port:
        answers = {}
        clients = [
            threading.Thread(
                target=lambda n=n: answers.__setitem__(n, call(port, "POST", "/translate", {"q": f"line {n}", **LANGS}))
            )
            for n in range(4)
        ]
        for c in clients:
            c.start()
        while call(port, "GET", "/metrics")[2]["queue_lines"] < 4:
            time.sleep(0.01)
        status, headers, answer = call(port, "POST", "/translate", {"q": "one too many", **LANGS})
        assert status == 503 and headers["retry-after"] == "3" and "retry later" in answer["error"]
        engine.gate.set()
        for c in clients:
            c.join(30)
        assert {n: answers[n][::2] for n in range(4)} == {n: (200, {"translatedText": f"LINE {n}"}) for n in range(4)}
        assert call(port, "POST", "/translate", {"q": "room again", **LANGS})[::2] == (
            200,
            {"translatedText": "ROOM AGAIN"},
        )


def test_the_default_queue_admits_64_concurrent_one_line_requests():
    engine = ScriptedEngine()
    engine.gate.clear()
    with in_process(engine, ServeConfig()) as port:
        answers = {}
        clients = [
            threading.Thread(
                target=lambda n=n: answers.__setitem__(n, call(port, "POST", "/translate", {"q": f"s {n}", **LANGS}))
            )
            for n in range(64)
        ]
        for c in clients:
            c.start()
        while call(port, "GET", "/metrics")[2]["queue_lines"] < 64:
            time.sleep(0.01)
        engine.gate.set()
        for c in clients:
            c.join(30)
        assert all(answers[n][::2] == (200, {"translatedText": f"S {n}"}) for n in range(64))
        assert len(engine.calls) < 64  # decoded together, not one by one


def test_a_model_error_is_that_requests_500_with_its_id_and_the_detail_goes_to_the_log(caplog):
    engine = ScriptedEngine()
    with in_process(engine, ServeConfig()) as port:
        status, headers, answer = call(port, "POST", "/translate", {"q": ["fine", "boom"], **LANGS})
        request_id = headers["x-request-id"]
        assert status == 500 and answer == {
            "error": f"Cannot translate text: internal error (request id {request_id}; the server log has it)"
        }
        assert call(port, "POST", "/translate", {"q": "fine", **LANGS})[::2] == (200, {"translatedText": "FINE"})
        assert call(port, "GET", "/metrics")[2]["requests_by_status"]["500"] == 1
    logged = [r for r in caplog.records if request_id in r.getMessage()]
    assert logged and "CUDA error" in str(logged[0].exc_info[1])  # the detail, with the id, in the server's log


def test_an_unexpected_error_in_a_route_is_a_500_with_its_id_and_nothing_of_the_exception(caplog):
    with in_process(ScriptedEngine(), ServeConfig()) as port:
        status, headers, answer = call(port, "POST", "/api/attention", {"q": "a secret sentence"})
        request_id = headers["x-request-id"]
        assert status == 500 and request_id in answer["error"] and "secret" not in answer["error"]
        assert call(port, "GET", "/health")[0] == 200
    logged = [r for r in caplog.records if request_id in r.getMessage()]
    assert logged and "secret detail" in str(logged[0].exc_info[1])


def test_concurrent_requests_are_decoded_together_within_the_gathering_window():
    engine = ScriptedEngine()
    with in_process(engine, ServeConfig(batch_wait_ms=300)) as port:
        answers = {}
        clients = [
            threading.Thread(
                target=lambda n=n: answers.__setitem__(
                    n, call(port, "POST", "/api/translate", {"q": [f"a{n}", f"b{n}"]})
                )
            )
            for n in range(12)
        ]
        for c in clients:
            c.start()
        for c in clients:
            c.join(30)
        for n in range(12):
            status, _, answer = answers[n]
            assert status == 200 and [hyps[0]["text"] for hyps in answer["translations"]] == [f"A{n}", f"B{n}"]
        assert len(engine.calls) < 12 and sum(map(len, engine.calls)) == 24


class SteerableTranslator:
    """A Translator whose translate takes prefix=, constraints= and replace_unk= (as the steering controls do):
    records what it is given; each line's translation is its prefix + the line upper-cased."""

    def __init__(self) -> None:
        from types import SimpleNamespace

        self.tokenizer = SimpleNamespace(
            encode_src=lambda lines: [line.split() + ["</s>"] for line in lines],
            encode_tgt=lambda lines: [line.split() for line in lines],
        )
        self.model = SimpleNamespace(max_positions=1024)
        self.config = SimpleNamespace(decode=DecodeConfig(), data=SimpleNamespace(src_lang="es", tgt_lang="en"))
        self.reads_attention = False  # an ensemble's answer
        self.confidence_threshold = None  # no confidence calibration
        self.calls: list[dict] = []

    def translate(
        self,
        lines,
        *,
        nbest=None,
        alignment=False,
        alignment_layer=None,
        prefix=None,
        constraints=None,
        replace_unk=False,
    ):
        self.calls.append(dict(lines=list(lines), prefix=prefix, constraints=constraints, replace_unk=replace_unk))
        prefix = prefix or [""] * len(lines)
        return [[Translation(p + line.upper(), 0.0, 0.0, [1])] for p, line in zip(prefix, lines)]


def test_prefixes_constraints_and_replace_unk_pass_through_to_translate_joined_across_requests():
    from transformer.serving.engine import Engine

    translator = SteerableTranslator()
    with in_process(Engine(translator), ServeConfig(batch_wait_ms=300)) as port:
        answers = {}
        bodies = [
            {"q": ["a", "b"], "prefix": ["P:", ""], "constraints": [["x"], []], "replace_unk": True},
            {"q": "c", "prefix": "Q:", "constraints": ["y", "z"], "replace_unk": True},
        ]
        clients = [
            threading.Thread(target=lambda n=n: answers.__setitem__(n, call(port, "POST", "/api/translate", bodies[n])))
            for n in range(2)
        ]
        for c in clients:
            c.start()
        for c in clients:
            c.join(30)
        texts = [[hyps[0]["text"] for hyps in answers[n][2]["translations"]] for n in range(2)]
        assert texts == [["P:A", "B"], ["Q:C"]]
        (got,) = translator.calls  # one call for both requests, their per-line lists joined in arrival order
        assert got["replace_unk"] is True
        rows = sorted(zip(got["lines"], got["prefix"], got["constraints"]))
        assert rows == [("a", "P:", ["x"]), ("b", "", []), ("c", "Q:", ["y", "z"])]
        assert got["lines"] in (["a", "b", "c"], ["c", "a", "b"])  # each request's lines kept together, in order
        status, _, answer = call(port, "POST", "/api/translate", {"q": ["a"], "constraints": ["x"]})
        assert status == 400 and "each a list of strings" in answer["error"]
