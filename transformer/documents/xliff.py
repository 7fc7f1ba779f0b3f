"""`--format xliff`: XLIFF 1.2 and 2.0, each unit's source translated into its target.

- Read by expat with entities refused (xliff_events.py): an entity bomb or an external entity is one line, and
  nothing outside the file is read. Only the targets written change (and the state that marks them); every other
  byte stays, and a file with nothing to translate comes back byte for byte.
- XLIFF 1.2: each `<trans-unit>` (not `translate="no"`) whose `<target>` is missing or empty gets its `<source>`
  translated into a `<target state="needs-review-translation" state-qualifier="leveraged-mt">`, placed after the
  source with the source's indentation. XLIFF 2.0: each `<segment>` of a `<unit>` likewise, its `<target>` plain
  and the segment's `state` (where it has one) set to `initial`. Units already translated are left alone unless
  `retranslate`.
- Inline codes: `<g>`, `<pc>` and `<mrk>` are pairs placed around the target words aligned to theirs (a `<mrk>` that
  is `mtype="protected"` or `translate="no"` is a protected span, kept as written); a `<bpt>`/`<ept>` (1.2) or
  `<sc/>`/`<ec/>` (2.0) that nests well with the pairs around it is a pair too, so that a begin code never comes
  after its end; `<x/>`, `<bx/>`, `<ex/>`, `<ph>`, `<it>` (1.2), `<ph/>`, `<sm/>`, `<em/>`, `<cp/>` (2.0) and any
  other code, with what it holds, are protected spans: each comes back exactly once, as written. A `<bpt>` without
  its `<ept>` (an `<sc>` without its `<ec>`) in a source is refused, naming the line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from transformer.documents.segments import Atom, Char, Close, Open, Piece, Segment, bad_file, raw
from transformer.documents.xliff_events import Event, codec, read_events, with_attribute

PAIRS = {"g", "pc", "mrk"}
PAIRED_CODES = {"bpt": "ept", "sc": "ec"}  # a begin code -> its end code, matched within one source


@dataclass
class Unit:
    """Where one translatable unit stands: its source and target elements (event indices), and the element whose
    state marks a machine translation (1.2: the target; 2.0: the segment)."""

    source: tuple[int, int]
    target: tuple[int, int] | None
    holder: int  # the trans-unit's or segment's start event


class XliffFile:
    """An XLIFF file (see the module docstring)."""

    def __init__(self, data: str | bytes, name: str = "the document", retranslate: bool = False) -> None:
        self.given, self.name = data, name
        self.data = data.encode("utf-8") if isinstance(data, str) else data
        self.codec = "utf-8" if isinstance(data, str) else codec(self.data)
        self.events = read_events(self.data, name, "utf-8" if isinstance(data, str) else None)
        root = next((e for e in self.events if e.kind == "start"), None)
        if root is None or root.name != "xliff":
            raise bad_file(name, "not an XLIFF file (its root element is not <xliff>)")
        self.version2 = root.attrs.get("version", "1.2").startswith("2")
        units = _units(self.events, self.version2)
        self.todo = [u for u in units if retranslate or not self._translated(u)]
        self._segments = [self._segment(u) for u in self.todo]

    def segments(self) -> list[Segment]:
        return self._segments

    def _text(self, start: int, end: int) -> str:
        return self.data[start:end].decode(self.codec)

    def _translated(self, unit: Unit) -> bool:
        if unit.target is None:
            return False
        first, last = unit.target
        inner = self.events[first + 1 : last]
        return any(e.kind != "text" or e.text.strip() for e in inner)

    def _segment(self, unit: Unit) -> Segment:
        """A source's content as pieces: text (a reference read as its character), pairs, protected codes."""
        first, last = unit.source
        pieces: list[Piece] = []
        i = first + 1
        while i < last:
            event = self.events[i]
            written = self._text(event.start, event.end)
            if event.kind == "text":
                pieces.append(written if written == event.text else Char(event.text, written))
            elif event.kind == "start" and event.name in PAIRS:
                keep = event.attrs.get("mtype") == "protected" or event.attrs.get("translate") == "no"
                pieces.append(Open(written, keep=keep))
            elif event.kind == "end" and event.name in PAIRS:
                pieces.append(Close(written))
            elif event.kind == "start":
                end = _matching_end(self.events, i)
                _check_pair(self.events, i, last, self.data, self.name)
                pieces.append(_code(event, self._text(event.start, self.events[end].end)))
                i = end
            else:
                pieces.append(Atom(written))
            i += 1
        return Segment(_paired_codes(pieces), escape, {"unit": unit})

    def rebuild(self, outputs: Sequence[Sequence[Piece]]) -> str | bytes:
        if not self.todo:
            return self.given
        edits: list[tuple[int, int, str]] = []  # (start, end, new text) of byte ranges
        for unit, output in zip(self.todo, outputs):
            edits += self._edits(unit, "".join(raw(piece) for piece in output))
        out, at = [], 0
        for start, end, text in sorted(edits):
            out += [self.data[at:start], text.encode(self.codec, "xmlcharrefreplace")]
            at = end
        data = b"".join([*out, self.data[at:]])
        return data.decode("utf-8") if isinstance(self.given, str) else data

    def _edits(self, unit: Unit, text: str) -> list[tuple[int, int, str]]:
        events, edits = self.events, []
        holder = events[unit.holder]
        if self.version2 and "state" in holder.attrs:
            edits.append(
                (holder.start, holder.end, with_attribute(self._text(holder.start, holder.end), "state", "initial"))
            )
        if unit.target is None:
            source, end = events[unit.source[0]], events[unit.source[1]]
            k = unit.source[0]
            while k > 0 and events[k - 1].kind == "text" and not events[k - 1].text.strip():
                k -= 1
            indent = self._text(events[k].start, source.start)  # the whitespace before the source
            tag = source.qname[: -len("source")] + "target"
            return [*edits, (end.end, end.end, f"{indent}<{tag}{self._state()}>{text}</{tag}>")]
        start, end = events[unit.target[0]], events[unit.target[1]]
        tag = self._text(start.start, start.end)
        if not self.version2:
            tag = with_attribute(
                with_attribute(tag, "state", "needs-review-translation"), "state-qualifier", "leveraged-mt"
            )
        if end.start == end.end:  # <target/>: written out whole
            tag = tag[:-2].rstrip() + ">"
            return [*edits, (start.start, start.end, f"{tag}{text}</{start.qname}>")]
        return [*edits, (start.start, start.end, tag), (start.end, end.start, text)]

    def _state(self) -> str:
        return "" if self.version2 else ' state="needs-review-translation" state-qualifier="leveraged-mt"'


def _units(events: list[Event], version2: bool) -> list[Unit]:
    """The translatable units, in order: 1.2's trans-units, 2.0's segments (not in a unit marked translate="no")."""
    holder_name = "segment" if version2 else "trans-unit"
    units, stack, skip = [], [], 0
    current: dict | None = None
    for i, event in enumerate(events):
        if event.kind == "start":
            stack.append(i)
            if event.name in ("unit", "trans-unit", "group") and event.attrs.get("translate") == "no":
                skip += 1
            elif event.name == holder_name and not skip:
                current = {"holder": i, "depth": len(stack), "source": None, "target": None}
        elif event.kind == "end":
            start = stack.pop()
            name = events[start].name
            if current is not None and len(stack) == current["depth"] and name in ("source", "target"):
                current[name] = (start, i) if current[name] is None else current[name]
            elif current is not None and start == current["holder"]:
                if current["source"] is not None:
                    units.append(Unit(current["source"], current["target"], current["holder"]))
                current = None
            elif name in ("unit", "trans-unit", "group") and events[start].attrs.get("translate") == "no":
                skip -= 1
    return units


class _Code(Atom):
    """A begin or end code (`<bpt>`/`<ept>`, `<sc/>`/`<ec/>`) until `_paired_codes` pairs it."""


def _code(event: Event, written: str) -> Atom:
    if event.name in PAIRED_CODES or event.name in PAIRED_CODES.values():
        key = event.attrs.get("rid", event.attrs.get("id", event.attrs.get("startRef")))
        if event.attrs.get("isolated") != "yes":
            return _Code(written, protected=f"{event.name in PAIRED_CODES} {key}")
    return Atom(written, protected="inline code")


def _paired_codes(pieces: list[Piece]) -> list[Piece]:
    """Begin and end codes that nest well with the pairs around them as pairs (placed around the words they hold,
    in order); any other as a protected atom."""
    out: list[Piece] = []
    stack: list[tuple[str | None, int]] = []  # (a code's key, None for a pair), its place in `out`
    for piece in pieces:
        if isinstance(piece, _Code):
            begins, key = piece.protected.split(" ", 1)
            if begins == "True":
                stack.append((key, len(out)))
                out.append(piece)
            elif stack and stack[-1][0] == key:
                at = stack.pop()[1]
                out[at] = Open(out[at].raw)
                out.append(Close(piece.raw))
            else:
                out.append(Atom(piece.raw, protected="inline code"))
            continue
        if isinstance(piece, Open):
            stack.append((None, len(out)))
        elif isinstance(piece, Close):
            while stack and stack[-1][0] is not None:  # a code begun inside this pair, not ended in it
                at = stack.pop()[1]
                out[at] = Atom(out[at].raw, protected="inline code")
            stack = stack[:-1]
        out.append(piece)
    for key, at in stack:
        if key is not None:
            out[at] = Atom(out[at].raw, protected="inline code")
    return out


def _matching_end(events: list[Event], i: int) -> int:
    depth = 0
    for j in range(i, len(events)):
        depth += (events[j].kind == "start") - (events[j].kind == "end")
        if depth == 0:
            return j
    return len(events) - 1


def _check_pair(events: list[Event], i: int, last: int, data: bytes, name: str) -> None:
    """A begin code (`<bpt>`, `<sc>`) must have its end code (`<ept>`, `<ec>`) in the same source."""
    event = events[i]
    if event.name not in PAIRED_CODES or event.attrs.get("isolated") == "yes":
        return
    key = event.attrs.get("rid", event.attrs.get("id"))
    ending = PAIRED_CODES[event.name]
    for other in events[i + 1 : last]:
        if other.kind == "start" and other.name == ending:
            if other.attrs.get("rid", other.attrs.get("id", other.attrs.get("startRef"))) == key:
                return
            if other.attrs.get("startRef") == key:
                return
    line = data.count(b"\n", 0, event.start) + 1
    raise bad_file(name, f'line {line}: <{event.name} id="{key}"> has no <{ending}> to match it in its source')
