"""Protected spans through the server (the real `python -m transformer serve` on a loopback port): placeholders,
URLs and numbers come back as written from /translate and /api/translate, as the Python API gives them; the request
fields turn protection off or add patterns; a bad pattern is a 400 with an `error`; a gettext file is translated
through /translate_file."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("multipart")
pytest.importorskip("sentencex")
polib = pytest.importorskip("polib")

from document_samples import SAMPLES  # noqa: E402
from serve_client import Served, call, download, upload  # noqa: E402
from tiny_checkpoint import build_trained  # noqa: E402

pytestmark = pytest.mark.slow
LANGS = {"source": "xx", "target": "yy"}
LINE = "the red cat %s sat on https://x.org/a 42 times"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return build_trained(tmp_path_factory.mktemp("served"), norm_first=False, activation="relu")


@pytest.fixture(scope="module")
def server(checkpoint, tmp_path_factory):
    served = Served(["--checkpoint", str(checkpoint)], tmp_path_factory.mktemp("log") / "server.log")
    yield served
    assert served.stop() == 0
    assert "Traceback" not in served.log.read_text(encoding="utf-8")


def test_spans_come_back_as_written_as_the_python_api_gives_them(server, checkpoint):
    from transformer import Translator

    expected = Translator.from_checkpoint(checkpoint).translate([LINE])[0]
    status, _, answer = call(server.port, "POST", "/translate", {"q": LINE, **LANGS})
    assert status == 200 and answer["translatedText"] == expected
    assert all(expected.count(span) == 1 for span in ("%s", "https://x.org/a", "42"))
    status, _, answer = call(server.port, "POST", "/api/translate", {"q": [LINE]})
    best = answer["translations"][0][0]
    assert best["text"] == expected and [k for k, _ in best["protected"]] == ["placeholder", "url", "number"]


def test_the_request_fields_switch_protection_and_add_patterns(server):
    status, _, answer = call(
        server.port, "POST", "/api/translate", {"q": "the ZX-9 cat", "protect_patterns": ["ZX-\\d"]}
    )
    assert status == 200 and "ZX-9" in answer["translations"][0][0]["text"]
    status, _, answer = call(server.port, "POST", "/api/translate", {"q": LINE, "protect": False})
    assert status == 200 and answer["translations"][0][0]["protected"] == []


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"protect_patterns": ["(a+)+"]}, "a repeat inside a repeat"),
        ({"protect": "maybe"}, "protect must be true or false"),
        ({"protect_patterns": [3]}, "protect_patterns must be a string or a list of strings"),
    ],
)
def test_a_bad_protection_field_is_a_400_naming_it(server, fields, expected):
    for path, body in (("/translate", {"q": LINE, **LANGS, **fields}), ("/api/translate", {"q": LINE, **fields})):
        status, _, answer = call(server.port, "POST", path, body)
        assert status == 400 and expected in answer["error"]


def test_a_gettext_catalogue_is_translated_through_translate_file(server):
    status, _, answer = upload(server.port, "messages.po", SAMPLES["po"].encode(), LANGS)
    assert status == 200, answer
    status, headers, body = download(server.port, answer["translatedFileUrl"])
    assert status == 200 and headers["content-type"].startswith("text/x-gettext-translation")
    entries = {e.msgid: e for e in polib.pofile(body.decode())}
    opened = entries["Could not open %s: the file is gone."]
    assert "fuzzy" in opened.flags and opened.msgstr.count("%s") == 1
