"""Keys and limits (transformer/serving/access.py) and several pairs over scripted engines, served in-process on a
loopback port: --req-limit per client address (another address goes on), a key's own limits from the keys file
(another key goes on), a list costing its items, --char-limit and --batch-limit, the keys file read again when it
changes, transformer-keys; two pairs decoded by their own workers (one held, the other answered), POST /detect and
`source: auto` routing to the detected language's model, and the moving window on a scripted clock."""

from __future__ import annotations

import http.client
import json
import os
import threading

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("py3langid")

from serve_client import ScriptedEngine, call, in_process  # noqa: E402

from transformer.commands.cli import keys_main  # noqa: E402
from transformer.config import ServeConfig  # noqa: E402
from transformer.decoding.streaming import Translation  # noqa: E402
from transformer.serving import access  # noqa: E402
from transformer.serving.access import KeyRing, RateLimiter  # noqa: E402
from transformer.serving.registry import Model, Registry  # noqa: E402
from transformer.serving.requests import ApiError  # noqa: E402

ES_EN = {"source": "es", "target": "en"}


class Reversing(ScriptedEngine):
    """en -> es: a line's words in reverse order."""

    languages = ("en", "es")

    def decode(self, settings, lines, controls):
        self.gate.wait(30)
        self.calls.append(list(lines))
        return [[Translation(" ".join(reversed(line.split())), -1.0, -1.0, [1])] for line in lines]


def two_pairs() -> tuple[ScriptedEngine, Reversing, Registry]:
    upper, reverse = ScriptedEngine(), Reversing()
    return upper, reverse, Registry([Model(upper, ("es-en.pt",)), Model(reverse, ("en-es.pt",))])


def post_from(port: int, address: str, body: dict):
    """POST /translate from the loopback address `address` (127.0.0.2 is another client than 127.0.0.1)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(address, 0))
    try:
        connection.request("POST", "/translate", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read())
    finally:
        connection.close()


def test_the_request_limit_holds_per_client_address_and_others_go_on():
    with in_process(ScriptedEngine(), ServeConfig(req_limit=3, batch_wait_ms=0)) as port:
        assert [post_from(port, "127.0.0.1", {"q": f"a{n}", **ES_EN})[0] for n in range(3)] == [200] * 3
        status, headers, answer = post_from(port, "127.0.0.1", {"q": "one too many", **ES_EN})
        assert status == 429 and answer == {"error": "Slowdown: 3 per 1 minute"} and int(headers["retry-after"]) >= 1
        assert post_from(port, "127.0.0.2", {"q": "another client", **ES_EN})[::2] == (
            200,
            {"translatedText": "ANOTHER CLIENT"},
        )
        assert call(port, "GET", "/languages")[0] == 200  # exempt, as in LibreTranslate


def test_a_list_costs_one_request_per_item():
    with in_process(ScriptedEngine(), ServeConfig(req_limit=5, batch_wait_ms=0)) as port:
        assert call(port, "POST", "/translate", {"q": ["a", "b", "c", "d"], **ES_EN})[0] == 200
        assert call(port, "POST", "/translate", {"q": "e", **ES_EN})[0] == 200  # 4 + 1: the window is full
        assert call(port, "POST", "/translate", {"q": "f", **ES_EN})[0] == 429


def test_a_key_with_its_own_limits_is_held_to_them_while_other_keys_go_on(tmp_path):
    (tmp_path / "keys.txt").write_text("# team keys\nsmall 2\nwide\nshort 50 10\n", encoding="utf-8")
    keys = KeyRing.from_file(tmp_path / "keys.txt")
    with in_process(ScriptedEngine(), ServeConfig(req_limit=100, batch_wait_ms=0), keys=keys) as port:
        small = [call(port, "POST", "/translate", {"q": "x", **ES_EN, "api_key": "small"})[0] for _ in range(3)]
        assert small == [200, 200, 429]
        wide = [call(port, "POST", "/translate", {"q": "x", **ES_EN, "api_key": "wide"})[0] for _ in range(5)]
        assert wide == [200] * 5
        status, _, answer = call(port, "POST", "/translate", {"q": "eleven char", **ES_EN, "api_key": "short"})
        assert (
            status == 400 and answer["error"] == "Invalid request: request (11) exceeds text limit (10) (--char-limit)"
        )
        assert call(port, "POST", "/translate", {"q": "ten chars!", **ES_EN, "api_key": "short"})[0] == 200
        assert call(port, "POST", "/translate", {"q": "x", **ES_EN, "api_key": "nope"})[0] == 403


def test_char_and_batch_limits_answer_libretranslates_400():
    with in_process(ScriptedEngine(), ServeConfig(char_limit=12, batch_limit=2, batch_wait_ms=0)) as port:
        status, _, answer = call(port, "POST", "/translate", {"q": ["a", "b", "c"], **ES_EN})
        assert (
            status == 400 and answer["error"] == "Invalid request: request (3) exceeds text limit (2) (--batch-limit)"
        )
        status, _, answer = call(port, "POST", "/translate", {"q": ["seven c", "six ch"], **ES_EN})
        assert status == 400 and "request (13) exceeds text limit (12)" in answer["error"]
        assert call(port, "POST", "/api/translate", {"q": ["a", "b", "c"]})[0] == 400
        assert call(port, "GET", "/frontend/settings")[2]["charLimit"] == 12


def test_the_keys_file_is_read_again_when_it_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(access, "RELOAD_S", 0.0)
    path = tmp_path / "keys.txt"
    assert keys_main(["--api-keys", str(path), "add", "--key", "first"]) == 0
    keys = KeyRing.from_file(path)
    with in_process(ScriptedEngine(), ServeConfig(batch_wait_ms=0), keys=keys) as port:
        assert call(port, "POST", "/translate", {"q": "x", **ES_EN, "api_key": "second"})[0] == 403
        assert keys_main(["--api-keys", str(path), "add", "--key", "second", "--req-limit", "1"]) == 0
        os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))  # a coarse clock's change
        assert call(port, "POST", "/translate", {"q": "x", **ES_EN, "api_key": "second"})[0] == 200
        assert call(port, "POST", "/translate", {"q": "x", **ES_EN, "api_key": "second"})[0] == 429
        path.write_text("broken line with words\n", encoding="utf-8")  # a bad edit: the keys read before stay
        os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 2 * 10**9))
        assert call(port, "POST", "/translate", {"q": "x", **ES_EN, "api_key": "first"})[0] == 200


def test_transformer_keys_adds_lists_and_removes(tmp_path, capsys):
    path = tmp_path / "keys.txt"
    path.write_text("# a comment kept\nold 5\n", encoding="utf-8")
    assert keys_main(["--api-keys", str(path), "add", "--req-limit", "30", "--char-limit", "900"]) == 0
    made = capsys.readouterr().out.strip()
    assert len(made) == 32 and all(c in "0123456789abcdef" for c in made)
    assert keys_main(["--api-keys", str(path), "remove", "old"]) == 0
    assert path.read_text(encoding="utf-8") == f"# a comment kept\n{made} 30 900\n"
    capsys.readouterr()
    assert keys_main(["--api-keys", str(path), "list"]) == 0
    assert capsys.readouterr().out == f"{made}\treq_limit 30\tchar_limit 900\n"
    for argv, message in [
        (["remove", "nobody"], "has no key 'nobody'"),
        (["remove", made], "is the last key"),
        (["add", "--key", "two words"], "a key is one word"),
        (["add", "--char-limit", "5"], "--char-limit needs --req-limit"),
        (["add", "--req-limit", "0"], "must be positive"),
    ]:
        assert keys_main(["--api-keys", str(path), *argv]) == 2
        assert message in capsys.readouterr().err
    (tmp_path / "bad.txt").write_text("key 1 2 3\n", encoding="utf-8")
    assert keys_main(["--api-keys", str(tmp_path / "bad.txt")]) == 2
    assert "line 1: write KEY [REQ_LIMIT [CHAR_LIMIT]]" in capsys.readouterr().err


def test_each_pair_has_its_own_worker_one_held_pair_does_not_hold_the_other():
    upper, reverse, registry = two_pairs()
    upper.gate.clear()  # es-en's model is held
    with in_process(registry, ServeConfig(batch_wait_ms=0)) as port:
        held = {}
        thread = threading.Thread(
            target=lambda: held.update(a=call(port, "POST", "/translate", {"q": "hola", **ES_EN}))
        )
        thread.start()
        answer = call(port, "POST", "/translate", {"q": "the dog eats", "source": "en", "target": "es"}, timeout=10)
        assert answer[::2] == (200, {"translatedText": "eats dog the"})
        assert thread.is_alive()  # es-en's request still waits for its model
        metrics = call(port, "GET", "/metrics")[2]
        assert {m["pair"]: m["queue_lines"] for m in metrics["models"]} == {"es-en": 1, "en-es": 0}
        upper.gate.set()
        thread.join(30)
        assert held["a"][::2] == (200, {"translatedText": "HOLA"})


def test_detect_and_auto_route_to_the_detected_languages_model():
    _, _, registry = two_pairs()
    with in_process(registry, ServeConfig(batch_wait_ms=0)) as port:
        status, _, ranked = call(port, "POST", "/detect", {"q": "El perro come pan y bebe agua en la casa."})
        assert status == 200 and [r["language"] for r in ranked] == ["es", "en"] and ranked[0]["confidence"] > 50
        body = {"q": ["the dog eats bread", "and drinks water"], "source": "auto", "target": "es"}
        status, _, answer = call(port, "POST", "/translate", body)
        assert status == 200 and answer["translatedText"] == ["bread eats dog the", "water drinks and"]
        assert [d["language"] for d in answer["detectedLanguage"]] == ["en", "en"]  # one per item, as LibreTranslate
        status, _, answer = call(port, "POST", "/translate", {"q": "12 + 30 = 42", "source": "auto", "target": "es"})
        assert (status, answer["translatedText"], answer["detectedLanguage"]["confidence"]) == (
            200,
            "12 + 30 = 42",
            0.0,
        )
        german = {"q": "Das Parlament verweigerte heute den Antrag der Regierung.", "source": "auto", "target": "es"}
        status, _, answer = call(port, "POST", "/translate", german)
        assert status == 400 and "in none of the languages this server translates from here (en)" in answer["error"]


@pytest.mark.parametrize(
    "body, headers, status, message",
    [
        ({"q": "123 456 !!!"}, None, 400, "q holds no letter"),
        ({"q": ""}, None, 400, "missing q parameter"),
        ({"q": {"a": 1}}, None, 400, "q must be a string or a list of strings"),
        (b'{"q": "\xff\xfe"}', {"Content-Type": "application/json"}, 400, "Invalid JSON format"),
        (b"\x00\x01junk", {"Content-Type": "application/json"}, 400, "Invalid JSON format"),
        ({"q": "a" * (1 << 20)}, None, 413, "Request body too large"),
    ],
)
def test_detect_refuses_junk_with_a_4xx(body, headers, status, message):
    _, _, registry = two_pairs()
    with in_process(registry, ServeConfig(batch_wait_ms=0)) as port:
        got, _, answer = call(port, "POST", "/detect", body, headers=headers)
        assert got == status and message in answer["error"]
        assert call(port, "POST", "/detect", {"q": ["the dog", "eats bread"]})[2][0]["language"] == "en"


def test_the_moving_window_on_a_scripted_clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(access.time, "monotonic", lambda: now[0])
    rates = RateLimiter()
    rates.admit("a", 2)
    now[0] += 30
    rates.admit("a", 2, cost=3)  # admitted while the window had room: counts 3
    with pytest.raises(ApiError) as caught:
        rates.admit("a", 2)
    assert caught.value.status == 429 and caught.value.headers["Retry-After"] == "61"  # both must leave: at 1090
    now[0] += 31  # the first request left the window; the 3 of the second still fill it
    with pytest.raises(ApiError):
        rates.admit("a", 2)
    now[0] += 30
    rates.admit("a", 2)
    monkeypatch.setattr(access, "CLIENTS", 2)
    for client in ("b", "c", "d"):
        rates.admit(client, 1)
    assert list(rates._seen) == ["c", "d"]  # the least recently seen client is forgotten first
