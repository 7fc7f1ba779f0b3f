"""transformer-serve's options that need a server of their own, each started for its test on a free loopback
port: API keys, bad command lines (one line, exit 2), a full queue's 503 with Retry-After, an ensemble of two
checkpoints, and a graceful SIGTERM that answers every request in flight before it exits 0, within its bound even
with clients that stall. Answers are checked against the Python API on the same checkpoint, as in
tests/test_serving.py.
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
from test_serving import FORM, LANGS, post  # noqa: E402
from tiny_checkpoint import build_sibling, build_trained, sentences  # noqa: E402

from transformer.commands.cli import serve_main  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_trained(tmp_path_factory.mktemp("served"), norm_first=False, activation="relu")


@pytest.fixture(scope="module")
def oracle(checkpoint):
    from transformer import Translator

    return Translator.from_checkpoint(checkpoint)


def test_api_keys(checkpoint, tmp_path, oracle):
    (tmp_path / "keys.txt").write_text("# the team's keys\nk-one\n\nk-two\n", encoding="utf-8")
    served = Served(["--checkpoint", str(checkpoint), "--api-keys", str(tmp_path / "keys.txt")], tmp_path / "log")
    try:
        status, _, answer = post(served, "/translate", {"q": "the cat", **LANGS})
        assert status == 400 and "API key" in answer["error"]
        assert post(served, "/translate", {"q": "the cat", **LANGS, "api_key": "k-three"})[::2] == (
            403,
            {"error": "Invalid API key"},
        )
        expected = {"translatedText": oracle.translate(["the cat"])[0]}
        assert post(served, "/translate", {"q": "the cat", **LANGS, "api_key": "k-two"})[::2] == (200, expected)
        form = "q=the+cat&source=xx&target=yy&api_key=k-one"
        assert post(served, "/translate", form, headers=FORM)[::2] == (200, expected)
        assert post(served, "/api/translate", {"q": "the cat"})[0] == 400
        assert call(served.port, "GET", "/languages")[0] == 200  # exempt, as in LibreTranslate
    finally:
        assert served.stop() == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--checkpoint", "missing.pt"], "missing.pt"),
        (["--checkpoint", "{ckpt}", "--port", "70000"], "port must be in [0, 65535]"),
        (["--checkpoint", "{ckpt}", "--api-keys", "nokeys.txt"], "cannot read the API keys file"),
        (["--checkpoint", "{ckpt}", "--max-lines", "0"], "must be positive"),
        (["--checkpoint", "{ckpt}", "--file-ttl-s", "0"], "must be positive"),
        (["--checkpoint", "{ckpt}", "--req-limit", "0"], "must be positive, or -1 for none"),
        (
            ["--checkpoint", "{ckpt}", "--max-file-bytes", "2000", "--file-store-bytes", "1000"],
            "file_store_bytes (1000) must be at least max_file_bytes (2000)",
        ),
        (["--checkpoint", "{ckpt}", "--port", "{busy}"], "cannot listen on 127.0.0.1:"),
    ],
)
def test_bad_command_lines_are_one_line_and_exit_2(checkpoint, argv, message, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        argv = [a.format(ckpt=checkpoint, busy=busy.getsockname()[1]) for a in argv]
        assert serve_main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("error: ") and len(err.strip().splitlines()) == 1


def _in_flight(served, texts: list[str]) -> tuple[list[threading.Thread], dict[int, object]]:
    """One client thread per text, each posting it to /translate; returns once all of them wait in the queue."""
    answers: dict[int, object] = {}
    clients = [
        threading.Thread(
            target=lambda n=n: answers.__setitem__(n, post(served, "/translate", {"q": texts[n], **LANGS}))
        )
        for n in range(len(texts))
    ]
    for c in clients:
        c.start()
    deadline = time.monotonic() + 20
    while call(served.port, "GET", "/metrics")[2]["queue_lines"] < len(texts) and time.monotonic() < deadline:
        time.sleep(0.02)
    return clients, answers


def test_sigterm_answers_every_accepted_request_then_exits_0_within_its_bound(checkpoint, tmp_path, oracle):
    args = ["--checkpoint", str(checkpoint), "--batch-wait-ms", "1500", "--batch-tokens", "100000"]
    served = Served([*args, "--shutdown-timeout-s", "4"], tmp_path / "log")  # requests wait 1.5 s for others
    texts = sentences(16, seed=21)
    clients, answers = _in_flight(served, texts)
    head = b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\n"
    stalled = [socket.create_connection(("127.0.0.1", served.port), timeout=20) for _ in range(2)]
    stalled[0].sendall(head[:30])  # half a header
    stalled[1].sendall(head + b'\r\n{"q": ')  # half a body: it waits until the shutdown's bound
    start = time.monotonic()
    assert served.stop() == 0  # SIGTERM with 16 requests admitted and not yet decoded
    assert time.monotonic() - start < 15
    for c in clients:
        c.join(30)
    assert [answers[n][0] for n in range(16)] == [200] * 16
    assert [answers[n][2]["translatedText"] for n in range(16)] == oracle.translate(texts)
    assert stalled[1].recv(65536).startswith(b"HTTP/1.1 503")  # cut at --shutdown-timeout-s, answered
    for sock in stalled:
        sock.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", served.port), timeout=2).close()
    log = served.log.read_text(encoding="utf-8")
    assert "every accepted request was answered" in log and "Traceback" not in log


def test_a_full_queue_answers_503_with_retry_after(checkpoint, tmp_path, oracle):
    args = ["--checkpoint", str(checkpoint), "--queue-lines", "4", "--batch-wait-ms", "3000", "--batch-tokens", "99999"]
    served = Served(args, tmp_path / "log")  # admitted requests wait 3 s for others: the queue stays full meanwhile
    try:
        texts = sentences(4, seed=31)
        clients, answers = _in_flight(served, texts)
        status, headers, answer = post(served, "/translate", {"q": "one too many", **LANGS})
        assert status == 503 and headers["retry-after"] == "1" and "retry later" in answer["error"]
        for c in clients:
            c.join(30)
        assert [answers[n][::2] for n in range(4)] == [(200, {"translatedText": t}) for t in oracle.translate(texts)]
    finally:
        assert served.stop() == 0


def test_an_ensemble_translates_as_the_python_api_and_the_page_is_told_it_has_no_alignments(checkpoint, tmp_path):
    from transformer import Translator

    sibling = build_sibling(checkpoint, tmp_path, seed=3)
    served = Served(["--checkpoint", str(checkpoint), str(sibling)], tmp_path / "log")
    try:
        q = ["the dog ran home", "a small cat"]
        expected = Translator.from_checkpoint([checkpoint, sibling]).translate(q)
        assert post(served, "/translate", {"q": q, **LANGS})[::2] == (200, {"translatedText": expected})
        assert call(served.port, "GET", "/frontend/settings")[2]["alignments"] is False
        status, _, answer = post(served, "/api/translate", {"q": q, "alignment": True})
        assert status == 400 and "ensemble" in answer["error"]
    finally:
        assert served.stop() == 0
