"""What must pass through a translation unchanged, found in text: placeholders, URLs, e-mail addresses, paths,
command-line options, numbers, inline markup marked not to translate, code, and the user's own patterns.

`find_spans(text, protection)` gives the spans as (start, end, kind), in order and never overlapping: of spans that
overlap, the one that starts first wins, then the longest. The kinds:
- placeholder: printf (`%s`, `%5.2f`, `%1$s`, `%(name)s`, `%%`), Qt (`%1`), Ruby (`%{name}`), shell (`$HOME`,
  `${HOME}`), Python/ICU/brace (`{}`, `{0}`, `{name!r:>10}`, `{count, plural, one {# file} other {# files}}`: a
  brace group is matched whole, however deep its braces nest; one never closed is text);
- url (`https://...`, `www.`; closing punctuation after it is not part of it), email, path (`/usr/bin`, `~/x`,
  `./configure`, `C:\\x`, `dir/file.ext`), option (`--name`, `--name=value`, `-v`), number (`42`, `3.14`,
  `1,000`, `12:30`: a switch, `Protection.numbers`);
- markup: an HTML element with `translate="no"` or class `notranslate`, written in the text (documents parse
  their own HTML: such elements there are kept spans); code: Markdown code spans and fenced code;
- pattern: what a user's regular expression (`Protection.patterns`) matches.
A user's pattern is refused where it could take exponential time (a repeat inside a repeat, a repeated
alternation, a backreference): the server runs requests' patterns, and must not stall on one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from transformer.errors import UserError

PRINTF = (
    r"%(?:\([A-Za-z_][\w.]*\)|\d+\$)?[-+#0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|ll|[hlLqjzt])?[diouxXeEfFgGaAcspnrb%]"
)
PLACEHOLDER = re.compile(rf"{PRINTF}|%\{{[A-Za-z_]\w*\}}|%L?\d+(?!\d)|\$\{{[A-Za-z_]\w*\}}|\$[A-Za-z_]\w*")
URL = re.compile(r"(?:\b(?:https?|ftp|file)://|\bwww\.)[^\s<>\"'`]+", re.IGNORECASE)
EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
PATH = re.compile(
    r"(?<![\w/.~-])(?:~|\.{1,2})?/[\w.+@-]+(?:/[\w.+@-]*)*"  # /usr/bin, ~/x, ./configure, ../x
    r"|\b[A-Za-z]:\\[^\s\"'<>|]*"  # C:\Program\x
    r"|(?<![\w/.-])[\w.-]+/[\w./-]*\.[A-Za-z]\w{0,5}\b"  # dir/file.ext
)
OPTION = re.compile(r"(?<![\w-])--[A-Za-z0-9][\w-]*(?:=[^\s,;)\]]+)?|(?<![\w-])-[A-Za-z](?![\w-])")
NUMBER = re.compile(r"(?<![\w.,/:-])[-+]?\d+(?:[.,:/-]\d+)*(?!\w)")
MARKUP = re.compile(
    r"<([A-Za-z][\w-]*)\b[^<>]*?(?:\btranslate\s*=\s*[\"']?no\b|\bclass\s*=\s*[\"'][^\"']*\bnotranslate\b)[^<>]*>"
    r".*?</\1\s*>",
    re.IGNORECASE | re.DOTALL,
)
CODE = re.compile(r"(`{3,}|~{3,})[^\n]*\n.*?\n\1|(`{1,3})(?!`)[^\n]+?(?<!`)\2(?!`)", re.DOTALL)
BRACE_HEAD = re.compile(r"\{\s*[\w.\[\]]*\s*(?:[}!:,])")  # what opens a brace placeholder: `{`, a name, then } ! : ,
TRAILING = ".,;:!?'\")]}>"  # closing punctuation that ends a sentence rather than a URL or a path
MAX_PATTERNS = 20  # user patterns at most (a request's too)
MAX_PATTERN_CHARS = 200  # the longest user pattern
KINDS = ("placeholder", "url", "email", "path", "option", "number", "markup", "code", "pattern")


@dataclass(frozen=True)
class Protection:
    """What is protected: `enabled` (False: nothing), `numbers` (digits kept as written), `patterns` (regular
    expressions of the user's, each match kept as written). Frozen and hashable: requests with equal protection
    are decoded together."""

    enabled: bool = True
    numbers: bool = True
    patterns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.patterns) > MAX_PATTERNS:
            raise UserError(f"{len(self.patterns)} patterns to protect: at most {MAX_PATTERNS}; join some with |")
        for pattern in self.patterns:
            compiled_pattern(pattern)

    @classmethod
    def off(cls) -> Protection:
        return cls(enabled=False)


PROTECT = Protection()  # the default: every kind, numbers too, no pattern of the user's


def compiled_pattern(pattern: str) -> re.Pattern:
    """A user's pattern compiled, or a one-line `UserError`: not a string, too long, invalid, matching the empty
    string, or open to exponential backtracking (see the module docstring)."""
    if not isinstance(pattern, str) or not pattern:
        raise UserError(f"a pattern to protect must be a non-empty regular expression, got {pattern!r}")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise UserError(
            f"pattern to protect {pattern[:40]!r}... is {len(pattern)} characters: at most {MAX_PATTERN_CHARS}"
        )
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise UserError(f"pattern to protect {pattern!r} is not a regular expression ({exc}); fix it") from None
    if compiled.match(""):
        raise UserError(f"pattern to protect {pattern!r} matches the empty string; make it match at least a character")
    if problem := _risky(_parse(pattern)):
        raise UserError(
            f"pattern to protect {pattern!r} has {problem}, which can take exponential time; write it "
            "without (a character class, or separate --protect patterns)"
        )
    return compiled


def _parse(pattern: str):
    try:
        from re import _parser as parser  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_parse as parser
    return parser.parse(pattern)


def _risky(items, in_repeat: bool = False) -> str:
    """What makes a parsed pattern risky ('' for nothing): a repeat in a repeat, an alternation in a repeat, a
    backreference."""
    for op, value in items:
        name = str(op)
        if name in ("GROUPREF", "GROUPREF_EXISTS"):
            return "a backreference"
        if name == "BRANCH" and in_repeat:
            return "an alternation inside a repeat"
        repeats = name.endswith("REPEAT") and value[1] > 1
        if repeats and in_repeat:
            return "a repeat inside a repeat"
        for inner in _inner(name, value):
            if found := _risky(inner, in_repeat or repeats):
                return found
    return ""


def _inner(name: str, value) -> list:
    """The parsed sub-patterns of one item of a parsed pattern."""
    if name.endswith("REPEAT"):
        return [value[2]]
    if name == "BRANCH":
        return list(value[1])
    if name == "SUBPATTERN":
        return [value[-1]]
    if name == "ATOMIC_GROUP":
        return [value]
    if name in ("ASSERT", "ASSERT_NOT"):
        return [value[1]]
    return []


def find_spans(text: str, protection: Protection) -> list[tuple[int, int, str]]:
    """The spans of `text` to keep as written: (start, end, kind), in order, none overlapping (module docstring)."""
    if not protection.enabled or not text:
        return []
    found = [(*span, "placeholder") for span in _braces(text)]
    finders = [(PLACEHOLDER, "placeholder"), (MARKUP, "markup"), (CODE, "code"), (EMAIL, "email")]
    finders += [(URL, "url"), (PATH, "path"), (OPTION, "option")]
    finders += [(NUMBER, "number")] if protection.numbers else []
    finders += [(compiled_pattern(p), "pattern") for p in protection.patterns]
    for regex, kind in finders:
        for match in regex.finditer(text):
            start, end = match.span()
            if kind in ("url", "path"):
                end = _trimmed(text, start, end)
            if end > start:
                found.append((start, end, kind))
    found.sort(key=lambda span: (span[0], -span[1]))
    spans, reached = [], 0
    for start, end, kind in found:
        if start >= reached:
            spans.append((start, end, kind))
            reached = end
    return spans


def _trimmed(text: str, start: int, end: int) -> int:
    """A URL's or a path's end without the closing punctuation after it (a bracket it opened stays)."""
    while end > start and text[end - 1] in TRAILING:
        closing = text[end - 1]
        opening = {")": "(", "]": "[", "}": "{"}.get(closing)
        if opening and text.count(opening, start, end) >= text.count(closing, start, end):
            break
        end -= 1
    return end


def _braces(text: str) -> list[tuple[int, int]]:
    """The outermost brace groups that are placeholders (`{` and a name, then `}`, `!`, `:` or `,`), each matched
    whole with its nested braces, in one pass; a brace never closed opens nothing."""
    if "{" not in text:
        return []
    pairs, stack = [], []
    for i, char in enumerate(text):
        if char == "{":
            stack.append(i)
        elif char == "}" and stack:
            pairs.append((stack.pop(), i + 1))
    pairs.sort()
    spans, reached = [], 0
    for start, end in pairs:
        if start >= reached and BRACE_HEAD.match(text, start, end):
            spans.append((start, end))
            reached = end
    return spans
