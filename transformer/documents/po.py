"""`--format po`: gettext PO and POT catalogues, each entry's msgid translated into its msgstr.

- Read with polib (the entries' contents, the header) and checked line by line by po_lines.py, which refuses what
  msgfmt refuses (a string never closed, a bad escape) with one line naming it, and knows where each entry's lines
  stand: only the msgstr lines of the entries translated change, and their flags line; comments, references,
  msgctxt, obsolete entries and every other byte stay as they were. A file with nothing to translate comes back
  byte for byte.
- Entries already translated (every msgstr filled) are left alone unless `retranslate`; the header (msgid "") and
  obsolete entries never change. Each machine translation is marked `fuzzy` (added to its `#,` line, or a `#, fuzzy`
  line before its msgctxt or msgid), as translators' tools expect: gettext does not use it until it is reviewed.
- Plurals: each msgstr[k] is translated from the msgid where form k of the target language (the header's
  `Plural-Forms`, read with the standard library's gettext.c2py; `nplurals=2; plural=(n != 1);` when it has none,
  as gettext assumes) serves n = 1 alone, and from msgid_plural otherwise; an entry gets all nplurals forms. An
  invalid Plural-Forms is refused.
- The file's charset (the header's Content-Type; UTF-8 when it names none) reads and writes it; bytes that are not
  of it are one line naming the line. Line endings (LF or CRLF) and a byte-order mark are kept.
"""

from __future__ import annotations

import codecs
import gettext
import os
import re
from collections.abc import Sequence

from transformer.documents.po_lines import Entry, field_lines, scan
from transformer.documents.segments import Piece, Segment, bad_file, plain, raw

CHARSET = re.compile(rb"charset=([A-Za-z0-9_.:-]+)")
PLURAL_FORMS = re.compile(r"^\s*nplurals\s*=\s*(\d+)\s*;\s*plural\s*=\s*(.+?)\s*;?\s*$")
DEFAULT_PLURALS = "nplurals=2; plural=(n != 1);"  # gettext's, when a catalogue names none
MAX_PLURALS = 10
PROBE = range(1001)  # the counts a plural form is read at: which forms serve n = 1 alone


class PoFile:
    """A PO file: its entries to translate as segments (see the module docstring)."""

    def __init__(self, data: str | bytes, name: str = "the document", retranslate: bool = False) -> None:
        self.data, self.name = data, name
        text, self.charset = _decoded(data, name)
        self.bom = text.startswith("\ufeff")
        text = text.removeprefix("\ufeff")
        self.newline = "\r\n" if "\r\n" in text.split("\n", 1)[0] + "\n" else "\n"
        self.lines = [line.removesuffix("\r") for line in text.split("\n")]
        entries = scan(self.lines, name)
        entries = entries[1:] if entries and entries[0].msgid == "" else entries  # the header
        catalogue = _catalogue(text, name)
        contents = [e for e in catalogue if not e.obsolete]
        if len(contents) != len(entries) or any(c.msgid != e.msgid for c, e in zip(contents, entries)):
            raise bad_file(name, "its entries cannot be told apart; check it with msgfmt -c")
        self.forms = plural_sources(catalogue.metadata.get("Plural-Forms", ""), name)
        self.todo = [(c, e) for c, e in zip(contents, entries) if c.msgid and (retranslate or not _filled(c))]
        self._segments = [[plain(c.msgid)] + ([plain(c.msgid_plural)] if c.msgid_plural else []) for c, _ in self.todo]

    def segments(self) -> list[Segment]:
        return [segment for pair in self._segments for segment in pair]

    def rebuild(self, outputs: Sequence[Sequence[Piece]]) -> str | bytes:
        if not self.todo:
            return self.data
        texts = iter("".join(raw(piece) for piece in output) for output in outputs)
        changes: dict[int, list[str]] = {}  # line index -> the lines written in its place ([] removes it)
        for (content, entry), pair in zip(self.todo, self._segments):
            singular = next(texts)
            plural = next(texts) if len(pair) > 1 else singular
            self._flag(content, entry, changes)
            if content.msgid_plural:
                fields = [(f"msgstr[{k}]", singular if one else plural) for k, one in enumerate(self.forms)]
            else:
                fields = [("msgstr", singular)]
            for start, end in entry.msgstr:  # the old msgstr lines go, the new ones stand in the first's place
                changes |= {i: [] for i in range(start, end + 1)}
            changes[entry.msgstr[0][0]] = [line for keyword, text in fields for line in field_lines(keyword, text)]
        lines = [out for i, line in enumerate(self.lines) for out in changes.get(i, [line])]
        text = ("\ufeff" if self.bom else "") + self.newline.join(lines)
        return text if isinstance(self.data, str) else _encoded(text, self.charset, self.name)

    def _flag(self, content, entry: Entry, changes: dict[int, list[str]]) -> None:
        """`fuzzy` added to the entry's flags line, or a `#, fuzzy` line before its `#|` lines or its keyword."""
        if "fuzzy" in content.flags:
            return
        if entry.flags is not None:
            line = self.lines[entry.flags]
            changes[entry.flags] = ["#, fuzzy, " + line.strip()[2:].strip()]
        else:
            at = entry.previous if entry.previous is not None else entry.keyword
            changes[at] = ["#, fuzzy", self.lines[at]]


def _catalogue(text: str, name: str):
    """The file's entries and header as polib reads them (never a file of the disk that the text names)."""
    import polib

    text = text if "\n" in text else text + "\n"
    if os.path.lexists(text):  # polib reads a string that names a file from the disk instead
        raise bad_file(name, "not a PO file")
    try:
        return polib.pofile(text, encoding="utf-8", wrapwidth=0)
    except (OSError, ValueError) as exc:
        raise bad_file(name, f"not a PO file ({exc})") from None


def _filled(content) -> bool:
    """Whether an entry is translated: its msgstr, or each of its msgstr[k], filled (a fuzzy one counts)."""
    if content.msgid_plural:
        return bool(content.msgstr_plural) and all(content.msgstr_plural.values())
    return bool(content.msgstr)


def plural_sources(header: str, name: str) -> list[bool]:
    """For each plural form k of the Plural-Forms header: whether msgstr[k] comes from the msgid (the form serves
    n = 1 alone) rather than msgid_plural; a one-line error for a header gettext cannot use."""
    if not header.strip() or "INTEGER" in header or "EXPRESSION" in header:  # none, or a template's placeholder
        header = DEFAULT_PLURALS
    match = PLURAL_FORMS.match(header)
    if match is None:
        raise bad_file(name, f"invalid Plural-Forms header {header!r}; write e.g. {DEFAULT_PLURALS!r}")
    count, expression = int(match.group(1)), match.group(2)
    if not 1 <= count <= MAX_PLURALS:
        raise bad_file(name, f"Plural-Forms: nplurals={count}; it must be 1 to {MAX_PLURALS}")
    try:
        form = gettext.c2py(expression)
        forms = [int(form(n)) for n in PROBE]
    except (ValueError, SyntaxError, RecursionError, ZeroDivisionError, OverflowError) as exc:
        raise bad_file(name, f"invalid Plural-Forms expression {expression!r} ({exc}); write e.g. (n != 1)") from None
    if any(not 0 <= k < count for k in forms):
        bad = next(n for n, k in zip(PROBE, forms) if not 0 <= k < count)
        raise bad_file(name, f"Plural-Forms gives form {form(bad)} for n = {bad}, past nplurals={count}")
    return [{n for n, f in zip(PROBE, forms) if f == k} == {1} for k in range(count)]


def _decoded(data: str | bytes, name: str) -> tuple[str, str]:
    """(text, charset) of a PO file: the header's charset (UTF-8 when it names none, or CHARSET)."""
    if isinstance(data, str):
        return data, "utf-8"
    found = CHARSET.search(data[:4096])
    charset = found.group(1).decode("ascii").lower() if found else "utf-8"
    charset = "utf-8" if charset == "charset" else charset
    try:
        codecs.lookup(charset)
    except LookupError:
        raise bad_file(name, f"unknown charset {charset!r} in its Content-Type header; convert it to UTF-8") from None
    try:
        return data.decode(charset), charset
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise bad_file(
            name,
            f"line {line}: byte {data[exc.start]:#04x} is not {charset} (its header's charset); "
            "convert it (msgconv -t UTF-8)",
        ) from None


def _encoded(text: str, charset: str, name: str) -> bytes:
    try:
        return text.encode(charset)
    except UnicodeEncodeError as exc:
        raise bad_file(
            name,
            f"a translation holds {text[exc.start]!r}, which charset {charset} cannot write; convert the "
            "file to UTF-8 first (msgconv -t UTF-8)",
        ) from None
