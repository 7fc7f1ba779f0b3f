"""documents/xliff.py and xliff_events.py: XLIFF 1.2 and 2.0 targets written as tools expect, inline codes kept as
protected spans, every other byte kept; an entity bomb or an external entity is refused without reading anything."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

import pytest
from document_samples import SAMPLES, Identity, Reverse, Upper

pytest.importorskip("sentencex")

from transformer.documents import translate_document  # noqa: E402
from transformer.errors import UserError  # noqa: E402

NS12 = "{urn:oasis:names:tc:xliff:document:1.2}"
V20 = (
    '<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="es" trgLang="en">\n'
    ' <file id="f1"><unit id="u1"><segment state="translated"><source>Pulse <pc id="1">aquí</pc> <ph id="2"/> ya'
    '</source><target>Old</target></segment>\n <segment><source>Otra <sc id="3"/>frase<ec startRef="3"/> {0}.'
    '</source></segment></unit>\n <unit id="u2" translate="no"><segment><source>No</source></segment></unit>'
    "</file></xliff>\n"
)


def _units(data: bytes) -> dict:
    root = ET.fromstring(data)
    return {u.get("id"): u for u in root.iter(NS12 + "trans-unit")}


def test_a_file_with_nothing_to_translate_comes_back_byte_for_byte():
    done = SAMPLES["xliff"].replace("<target/>", "<target>Hola</target>").encode()
    done = done.replace(b"quit.</source>\n", b"quit.</source><target>Ya</target>\n")
    assert translate_document(done, "xliff", Upper()) == done


def test_xliff12_targets_are_added_marked_for_review_with_their_codes_once():
    source = SAMPLES["xliff"].encode()
    out = translate_document(source, "xliff", Reverse())
    units = _units(out)
    first = units["1"].find(NS12 + "target")
    assert first.get("state") == "needs-review-translation" and first.get("state-qualifier") == "leveraged-mt"
    written = ET.tostring(first, encoding="unicode")
    assert written.count('<ns0:x id="2" />') == 1 and written.count("%s") == 1 and written.count("&amp;") == 1
    assert [g.text for g in first.iter(NS12 + "g")] == ["now Save"]  # a pair around its aligned words
    second = units["2"].find(NS12 + "target")  # <target/> filled; <bpt>/<ept> kept once each
    assert [e.tag for e in second] == [NS12 + "bpt", NS12 + "ept"] and second.get("state")
    assert units["3"].find(NS12 + "target").text == "Hecho" and units["3"].find(NS12 + "target").get("state") is None
    kept = out.decode().replace(out.decode().split("<target state")[1].split("</target>")[0], "")
    assert '<source>Click <g id="1">Save now</g> to keep %s &amp; <x id="2"/>quit.</source>\n        <target' in kept


def test_xliff20_segments_get_a_target_and_initial_state_when_retranslated():
    out = translate_document(V20, "xliff", Reverse())
    assert "<target>Old</target>" in out and 'state="translated"' in out  # left alone
    assert '<source>Otra <sc id="3"/>frase<ec startRef="3"/> {0}.</source><target>' in out
    again = translate_document(V20, "xliff", Reverse(), retranslate=True)
    assert 'state="initial"' in again and "Old" not in again and again.count('<pc id="1">') == 2
    assert "<source>No</source></segment>" in again  # a unit marked translate="no"


@pytest.mark.parametrize(
    "data, expected",
    [
        (
            '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]><xliff version="1.2">'
            "<file><body><trans-unit id='1'><source>&b;</source></trans-unit></body></file></xliff>",
            "declares an XML entity",
        ),
        (
            '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><xliff version="1.2"><file>'
            "<body><trans-unit id='1'><source>&e;</source></trans-unit></body></file></xliff>",
            "declares an XML entity",
        ),
        (
            '<xliff version="1.2"><file><body><trans-unit id="1"><source>a <bpt id="1">&lt;b&gt;</bpt>b</source>'
            "</trans-unit></body></file></xliff>",
            'line 1: <bpt id="1"> has no <ept>',
        ),
        (
            '<xliff version="1.2"><file><body><trans-unit id="1"><source>a <g id="1">b</source></trans-unit>',
            "not well-formed",
        ),
        ("<html><p>x</p></html>", "not an XLIFF file"),
        ('<xliff version="1.2"><source>&nope;</source></xliff>', "undefined entity"),
    ],
)
def test_a_bad_file_is_one_line_and_nothing_outside_it_is_read(data, expected):
    with pytest.raises(UserError, match=expected) as error:
        translate_document(data.encode(), "xliff", Identity(), name="x.xlf")
    assert "\n" not in str(error.value) and "root:" not in str(error.value)


def test_ten_thousand_units_in_bounded_time():
    units = "".join(
        f'<trans-unit id="{i}"><source>Unit {i} of <x id="a"/>%s</source></trans-unit>\n' for i in range(10_000)
    )
    data = f'<xliff version="1.2"><file><body>\n{units}</body></file></xliff>\n'.encode()
    start = time.perf_counter()
    out = translate_document(data, "xliff", Identity())
    assert out.count(b'state="needs-review-translation"') == 10_000 and time.perf_counter() - start < 120
