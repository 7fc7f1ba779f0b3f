"""A gettext PO file's lines as entries, strictly: where each entry's flags and translations stand, for po.py.

polib reads the entries' contents; it forgives what msgfmt refuses (a string never closed is read as if it were, a
bad escape kept as two characters), and it keeps no places. This scanner checks every line the way msgfmt does
(a keyword and a string, a continuation string, a comment or a blank line; strings closed, escapes among \\\\ \\"
\\n \\t \\r \\a \\b \\f \\v \\? \\' and octal or hex codes) and records, per entry, its first line, its `#,` flags
line and the lines of its msgstr fields, so that po.py rewrites those lines only and leaves every other byte as
it was. Obsolete entries (`#~`) are recorded as obsolete and never rewritten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from transformer.documents.segments import bad_file

KEYWORD = re.compile(r"(msgctxt|msgid_plural|msgid|msgstr(?:\[(\d+)\])?)[ \t]+(.*)$")
ESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
ESCAPES |= {"?": "?", "'": "'"}
STRING_PART = re.compile(r'[^"\\]+|\\(?:[0-7]{1,3}|x[0-9A-Fa-f]+|.)|"')
WRITTEN = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\a": "\\a", "\b": "\\b", "\f": "\\f"}
WRITTEN["\v"] = "\\v"


@dataclass
class Entry:
    """Where one entry stands: 0-based line indices."""

    first: int  # its first line (a comment, msgctxt or msgid)
    flags: int | None = None  # its `#,` line
    keyword: int | None = None  # its msgctxt or msgid line (a `#, fuzzy` line goes before it)
    previous: int | None = None  # its first `#|` line, if any (flags go before it)
    msgid: str = ""
    msgstr: list[tuple[int, int]] = field(default_factory=list)  # [first, last] lines of each msgstr field
    obsolete: bool = False
    state: str = "comments"


def unquote(text: str, name: str, line: int) -> str:
    """A PO string literal (`"..."`, trailing whitespace allowed) read, or a one-line error naming the line."""
    body = text.rstrip()
    if not body.startswith('"'):
        raise bad_file(name, f"line {line}: expected a string in double quotes, found {body[:30]!r}")
    out, at = [], 1
    for part in STRING_PART.finditer(body, 1):
        if part.start() != at:
            break
        piece, at = part.group(0), part.end()
        if piece == '"':
            if at != len(body):
                raise bad_file(name, f'line {line}: text after the closing quote; write \\" for a quote inside')
            return "".join(out)
        out.append(_escaped(piece, name, line) if piece.startswith("\\") else piece)
    raise bad_file(name, f'line {line}: a string that never ends (no closing "): close it on the same line')


def _escaped(piece: str, name: str, line: int) -> str:
    code = piece[1:]
    if code in ESCAPES:
        return ESCAPES[code]
    if code[:1].isdigit() and set(code) <= set("01234567"):
        return chr(int(code, 8))
    if code.startswith("x") and len(code) > 1:
        return chr(int(code[1:], 16) % 0x110000)
    raise bad_file(name, f"line {line}: bad escape {piece!r} in a string; write \\\\ for a backslash")


def quote(text: str) -> str:
    """`text` as a PO string literal."""
    return '"' + "".join(WRITTEN.get(c, c) for c in text) + '"'


def field_lines(keyword: str, text: str) -> list[str]:
    """A field (`msgstr`, `msgstr[1]`) as PO lines, one string per line of text when it holds line breaks."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    if len(lines) <= 1 and len(text) < 70:
        return [f"{keyword} {quote(text)}"]
    return [f'{keyword} ""', *(quote(line) for line in lines)]


def scan(lines: list[str], name: str) -> list[Entry]:
    """The entries of a PO file's lines (their line ends removed), in order, obsolete ones marked; a one-line
    error for a line msgfmt refuses."""
    entries: list[Entry] = []
    entry: Entry | None = None
    last = ""  # the keyword a continuation string adds to
    for i, line in enumerate(lines):
        text, number = line.strip(), i + 1
        if not text:
            entry, last = _ended(entry, entries, name, number), ""
        elif text.startswith("#"):
            obsolete = text.startswith("#~")
            if entry is None or entry.state == "str" or entry.obsolete != obsolete:
                _ended(entry, entries, name, number)
                entry = Entry(i, obsolete=obsolete)
            if text.startswith("#,") and entry.flags is None:
                entry.flags = i
            elif text.startswith("#|") and entry.previous is None:
                entry.previous = i
            last = ""
        elif text.startswith('"'):
            if entry is None or not last:
                raise bad_file(name, f"line {number}: a string with no keyword (msgid, msgstr, ...) before it")
            value = unquote(text, name, number)
            if last == "msgid":
                entry.msgid += value
            elif last.startswith("msgstr"):
                entry.msgstr[-1] = (entry.msgstr[-1][0], i)
        else:
            entry, last = _keyword(text, i, entry, entries, name)
    _ended(entry, entries, name, len(lines) + 1)
    return entries


ORDER = {"msgctxt": ("comments",), "msgid": ("comments", "ctxt"), "msgid_plural": ("id",)}  # what may come before


def _keyword(text: str, i: int, entry: Entry | None, entries: list[Entry], name: str) -> tuple[Entry, str]:
    """A keyword line read into its entry (a new one for msgctxt or msgid after a msgstr); (entry, keyword)."""
    match = KEYWORD.match(text)
    if match is None:
        raise bad_file(name, f"line {i + 1}: expected msgctxt, msgid, msgid_plural, msgstr, a string or a comment")
    keyword, value = match.group(1), unquote(match.group(3), name, i + 1)
    if entry is not None and entry.obsolete:
        entry = _ended(entry, entries, name, i + 1)
    if keyword in ("msgctxt", "msgid") and (entry is None or entry.state == "str"):
        _ended(entry, entries, name, i + 1)
        entry = Entry(i)
    if entry is None:
        raise bad_file(name, f"line {i + 1}: {keyword} with no msgid before it")
    if keyword in ORDER and entry.state not in ORDER[keyword]:
        raise bad_file(name, f"line {i + 1}: {keyword} out of place; is the msgstr of the entry before it missing?")
    if keyword.startswith("msgstr") and entry.state not in ("id", "plural", "str"):
        raise bad_file(name, f"line {i + 1}: msgstr with no msgid before it")
    if keyword in ("msgctxt", "msgid") and entry.keyword is None:
        entry.keyword = i
    entry.state = {"msgctxt": "ctxt", "msgid": "id", "msgid_plural": "plural"}.get(keyword, "str")
    if keyword == "msgid":
        entry.msgid = value
    elif keyword.startswith("msgstr"):
        entry.msgstr.append((i, i))
    return entry, keyword


def _ended(entry: Entry | None, entries: list[Entry], name: str, number: int) -> None:
    """An entry ended (a blank line, the next entry, the end of the file): recorded when complete, an error when
    its msgstr is missing; comments alone (and obsolete entries) are not entries to rewrite."""
    if entry is not None and entry.state in ("ctxt", "id", "plural"):
        raise bad_file(name, f"line {number}: the entry that starts on line {entry.first + 1} has no msgstr")
    if entry is not None and entry.state == "str" and not entry.obsolete:
        entries.append(entry)
    return None
