"""transformer-serve's bounds on one request's work, over real HTTP on a loopback port (the real server on the tiny
checkpoint of tests/tiny_checkpoint.py): each work limit hit is a 400 naming it and its value; an abusive request
is refused, or answered by its deadline, while another client's ordinary request is answered within seconds; a
client that sends half a header, or half a body, and stalls delays no one. None of it leaves a traceback in the
server's log. The shutdown's bound is tests/test_serving_options.py's.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("multipart")

from serve_client import Served, call  # noqa: E402
from tiny_checkpoint import build_trained, sentences  # noqa: E402

pytestmark = pytest.mark.slow
DEADLINE_S = 3.0
LIMITS = {  # small, so that the tiny model (40 positions) can reach each one; many lines, for a long request
    "--max-lines": 512,
    "--queue-lines": 1024,
    "--max-phrases": 4,
    "--max-phrase-pieces": 3,
    "--max-constraint-pieces": 6,
    "--max-prefix-pieces": 5,
    "--max-output-pieces": 20,
    "--request-timeout-s": DEADLINE_S,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    checkpoint = build_trained(tmp_path_factory.mktemp("served"), norm_first=False, activation="relu")
    args = [str(x) for pair in LIMITS.items() for x in pair]
    served = Served(["--checkpoint", str(checkpoint), *args], tmp_path_factory.mktemp("log") / "server.log")
    yield served
    assert served.stop() == 0
    assert "Traceback" not in served.log.read_text(encoding="utf-8")


def native(server, body, timeout=60):
    return call(server.port, "POST", "/api/translate", body, timeout=timeout)


# target pieces of the tiny tokenizer: "the", "a", "dog", "ran", "under", "mat": one each
@pytest.mark.parametrize(
    "body, flag, message",
    [
        ({"q": "the cat", "constraints": ["a", "the", "dog", "ran", "mat"]}, "--max-phrases", "5 constraint phrases"),
        ({"q": "the cat", "constraints": ["the a dog ran"]}, "--max-phrase-pieces", "phrase 1 has 4 target pieces"),
        (
            {"q": "the cat", "constraints": ["the a dog", "ran under mat", "a"]},
            "--max-constraint-pieces",
            "phrases have 7 target pieces",
        ),
        (
            {"q": ["x", "the cat"], "prefix": ["", "the a dog ran under mat"]},
            "--max-prefix-pieces",
            "line 2's prefix has 6 target pieces",
        ),
        ({"q": "the cat sat", "max_len_b": 30}, "--max-output-pieces", "line 1 (7 source tokens) 30 output pieces"),
        # 4 x 7 + 30 output pieces, capped at the model's 40 positions
        ({"q": "the cat sat", "max_len_a": 4.0}, "--max-output-pieces", "(7 source tokens) 39 output pieces"),
    ],
    ids=["phrases", "phrase-pieces", "constraint-pieces", "prefix-pieces", "output-pieces", "output-capped"],
)
def test_each_work_limit_hit_is_a_400_naming_it_and_its_value(server, body, flag, message):
    status, _, answer = native(server, body)
    assert status == 400 and message in answer["error"], answer
    assert f"past the server's limit of {LIMITS[flag]} (" in answer["error"] and flag in answer["error"]


def test_within_the_limits_a_request_is_answered(server):
    body = {"q": "the cat", "constraints": ["the a dog", "ran"], "prefix": "the a", "max_len_b": 20, "beam_size": 16}
    status, _, answer = native(server, body)
    assert status == 200 and len(answer["translations"]) == 1


def _timed(server, body, box: dict, name: str) -> threading.Thread:
    def run():
        start = time.monotonic()
        box[name] = (*native(server, body)[::2], time.monotonic() - start)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_an_abusive_request_is_refused_or_answered_by_its_deadline_while_another_client_is_answered(server):
    many = {"q": ["the dog ran home"] * 8, "constraints": [["the"] * 200] * 8}
    assert native(server, many)[0] == 400  # 200 one-piece phrases a line: refused before any decoding
    heavy = {  # at every limit: 512 lines of 4 phrases and a prefix, the widest beam, the longest output
        "q": sentences(512, seed=7),
        "constraints": [["the", "a", "dog", "ran"]] * 512,
        "prefix": ["the a dog"] * 512,
        "beam_size": 16,
        "max_len_b": 20,
    }
    answers: dict[str, tuple] = {}
    threads = [_timed(server, heavy, answers, "heavy")]
    while call(server.port, "GET", "/health")[2]["queue_lines"] < 512 and threads[0].is_alive():
        time.sleep(0.02)
    time.sleep(0.3)  # the heavy request is admitted and being decoded
    threads.append(_timed(server, {"q": "the old dog"}, answers, "ordinary"))
    for thread in threads:
        thread.join(60)
    status, answer, seconds = answers["ordinary"]
    assert status == 200 and seconds < 5, (status, seconds)
    status, answer, seconds = answers["heavy"]
    assert status in (200, 504) and seconds < DEADLINE_S + 1.5, (status, answer, seconds)
    if status == 504:
        assert "--request-timeout-s" in answer["error"]
        deadline = time.monotonic() + 5  # the decoder dropped the rest of its lines at its next turn
        while call(server.port, "GET", "/health")[2]["queue_lines"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert call(server.port, "GET", "/health")[2]["queue_lines"] == 0


def test_a_client_that_sends_half_a_header_or_half_a_body_and_stalls_delays_no_one(server):
    head = b"POST /api/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Le"
    body = b"POST /api/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 99\r\n\r\n{"
    half_head = socket.create_connection(("127.0.0.1", server.port))
    half_body = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE_S + 5)
    with half_head, half_body:
        half_head.sendall(head)
        half_body.sendall(body)
        start = time.monotonic()
        status, _, answer = native(server, {"q": "the old dog"}, timeout=10)
        assert status == 200 and time.monotonic() - start < 5
        answered = b""  # the body never comes: 408 at the request's deadline
        while not answered.endswith(b"}") and (chunk := half_body.recv(65536)):
            answered += chunk
        assert answered.startswith(b"HTTP/1.1 408") and b"--request-timeout-s" in answered
        assert time.monotonic() - start < DEADLINE_S + 2


def test_a_client_learns_which_controls_were_relaxed_and_which_phrases_are_unmet(server):
    """A constraint that cannot fit the output length the request allows is dropped before the search: the answer
    names it per line (relaxed, unmet); an ordinary line beside it reports nothing set aside."""
    line = sentences(1, seed=7)[0]
    body = {"q": [line, line], "constraints": [["the a dog"], []], "max_len_a": 0, "max_len_b": 2}
    status, _, answer = native(server, body)
    assert status == 200, answer
    steered, plain = (hyps[0] for hyps in answer["translations"])
    assert steered["relaxed"] == ["constraints"] and steered["unmet"] == ["the a dog"]
    assert plain["relaxed"] == [] and plain["unmet"] == [] and isinstance(plain["score"], float)
