"""An XML file as events with their byte ranges, read by expat with entities refused, for xliff.py.

Each event (an element's start or end, text, a comment, a CDATA mark, anything else) runs from where expat saw it
start to where the next one starts, so the events cover the file byte for byte and a span of it can be rewritten
while every other byte stays. Safe against what an XML file can do to its reader: an entity declaration (the
"billion laughs" bomb, an external entity naming a file or a URL) is refused before anything is expanded, and
external DTDs and parameter entities are never read, so nothing outside the file is ever opened.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from xml.parsers import expat

from transformer.documents.segments import bad_file

DECLARED = re.compile(rb"^<\?xml[^>]*encoding\s*=\s*[\"']([A-Za-z0-9._-]+)[\"']")


@dataclass
class Event:
    kind: str  # start, end, text, comment, cdata, other
    name: str  # an element's local name (no prefix); '' for the others
    attrs: dict
    start: int  # byte offsets [start, end)
    end: int = 0
    text: str = ""  # a text event's characters
    qname: str = ""  # an element's name as written (with its prefix)


class _RefusedError(Exception):
    pass


def read_events(data: bytes, name: str, encoding: str | None = None) -> list[Event]:
    """The file's events (see the module docstring); a one-line error for one that is not well-formed XML or that
    declares entities. encoding: overrides the file's own (for text handed in as str, encoded as UTF-8)."""
    parser = expat.ParserCreate(encoding)
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    events: list[Event] = []

    def add(kind: str, qname: str = "", attrs: dict | None = None, text: str = "") -> None:
        local = qname.rsplit(":", 1)[-1]
        events.append(Event(kind, local, attrs or {}, parser.CurrentByteIndex, text=text, qname=qname))

    def refuse(*_args) -> None:
        raise _RefusedError()

    parser.StartElementHandler = lambda qname, attrs: add("start", qname, attrs)
    parser.EndElementHandler = lambda qname: add("end", qname)
    parser.CharacterDataHandler = lambda text: add("text", text=text)
    parser.CommentHandler = lambda text: add("comment")
    parser.StartCdataSectionHandler = lambda: add("cdata")
    parser.EndCdataSectionHandler = lambda: add("cdata")
    parser.DefaultHandler = lambda text: add("other")
    parser.EntityDeclHandler = refuse
    parser.UnparsedEntityDeclHandler = refuse
    parser.ExternalEntityRefHandler = refuse
    try:
        parser.Parse(data, True)
    except _RefusedError:
        line = parser.CurrentLineNumber
        raise bad_file(
            name, f"line {line}: declares an XML entity; XLIFF needs none: remove the DOCTYPE's entities"
        ) from None
    except expat.ExpatError as exc:
        raise bad_file(name, f"line {exc.lineno}: not well-formed XML ({expat.ErrorString(exc.code)})") from None
    for event, after in zip(events, events[1:]):
        event.end = after.start
    if events:
        events[-1].end = len(data)
    return events


def codec(data: bytes) -> str:
    """The Python codec of an XML file's bytes: from its byte-order mark, its declaration, else UTF-8."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16-le" if data.startswith(b"\xff\xfe") else "utf-16-be"
    found = DECLARED.match(data.removeprefix(b"\xef\xbb\xbf"))
    return found.group(1).decode("ascii").lower() if found else "utf-8"


def with_attribute(tag: str, name: str, value: str) -> str:
    """A start tag as written with attribute `name` set to `value` (replaced, or added before its end)."""
    pattern = re.compile(rf"(\s{re.escape(name)}\s*=\s*)(\"[^\"]*\"|'[^']*')")
    if pattern.search(tag):
        return pattern.sub(lambda m: f'{m.group(1)}"{value}"', tag, count=1)
    end = len(tag) - (2 if tag.endswith("/>") else 1)
    return f'{tag[:end].rstrip()} {name}="{value}"{tag[end:]}'
