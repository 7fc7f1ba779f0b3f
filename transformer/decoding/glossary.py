"""Glossaries: pairs of terms (source term -> target term), loaded once and matched against each sentence. The target
terms of the terms a sentence holds become lexical constraints for that sentence (steering.py merges them with the
caller's), so its translation contains them; a sentence that holds no term is searched as without a glossary.

The file (`Glossary.load`): UTF-8 text, one term a line, `source term<TAB>target term`, with an optional third
column for case: `cased` (or `1`, `true`, `yes`) or not (`uncased`, `0`, `false`, `no`, or empty). Blank lines and
lines starting with `#` are skipped. Anything else (one column, four, an empty term, an unknown third column, a
source given twice with two targets, bytes that are not UTF-8) is a `UserError` naming the file and the line.

Decisions:
- A sentence holds a term where the term's words occur in it as whole words. Both are cut into tokens (a run of word
  characters, or one other non-space character), in Unicode NFC; the term's tokens must follow one another in the
  sentence, with space between two of them exactly where the term has space (any amount). So "Dios" occurs in
  "Dios," and "(Dios)" but not in "Diosa", "Nueva York" in "Nueva  York" but not in "NuevaYork".
- Case-insensitive (`str.casefold`) unless the term is cased; a cased term's tokens must be as written.
- Longest first, non-overlapping: of all the occurrences in a sentence the longest (in characters) is taken, then
  the next longest that overlaps none taken, and so on. Ties: a cased term before an uncased one, then the earlier
  in the sentence, then the earlier in the glossaries (file order; of several glossaries, the first's first).
- Each target term is asked once per sentence, in the order its source first occurs there; a phrase the caller
  already asked for is not asked twice (`merged`). A term's target is words: the search never continues its last
  word ("Esther", not "Esthers"), where a caller's phrase may be the start of one (`TermTarget`, constraints.py).
- Load once, match many: the terms are indexed by their first token (casefolded), so a sentence costs its tokens
  times the terms that begin with each of them, whatever the glossary's size.
- A term is a constraint like any other: where it cannot be met (too long for the maximum output length, or in
  conflict with other controls) the line's constraints are set aside and reported (relaxation.py: `relaxed`,
  `unmet`), and the line is still translated.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from transformer.errors import UserError
from transformer.fileio import utf8_lines

TOKEN = re.compile(r"\w+|[^\w\s]")  # a run of word characters, or one other non-space character
CASED = {"cased": True, "1": True, "true": True, "yes": True}
UNCASED = {"": False, "uncased": False, "0": False, "false": False, "no": False}


@dataclass(frozen=True)
class Term:
    """One glossary entry."""

    source: str  # the words to find in a source sentence
    target: str  # the words its translation must contain
    cased: bool = False  # True: the source matches only as written; False: whatever its case


class Match(NamedTuple):
    """A term found in a sentence: its characters [start, end) in the sentence's NFC form."""

    start: int
    end: int
    term: Term


class _Token(NamedTuple):
    start: int
    end: int
    text: str
    spaced: bool  # space between it and the token before


def _tokens(text: str) -> list[_Token]:
    found, last = [], None
    for m in TOKEN.finditer(text):
        found.append(_Token(m.start(), m.end(), m.group(), last is not None and m.start() > last))
        last = m.end()
    return found


def _key(term: Term) -> tuple:
    """What a term matches: its tokens (casefolded unless cased) and where space separates them."""
    tokens = _tokens(term.source)
    return tuple((t.text if term.cased else t.text.casefold(), t.spaced) for t in tokens)


class Glossary:
    """Terms indexed for matching: `matches(sentence)` finds them (see the module docstring), `targets(sentence)`
    gives the constraints they ask for. Falsy when empty: an empty glossary is no glossary."""

    def __init__(self, terms: Iterable[Term] = (), *, name: str = "glossary") -> None:
        self.name = name
        self.terms = tuple(
            Term(unicodedata.normalize("NFC", t.source.strip()), t.target.strip(), t.cased) for t in terms
        )
        self._index: dict[str, list[tuple[int, tuple]]] = {}
        for order, term in enumerate(self.terms):
            key = _key(term)
            if key:
                self._index.setdefault(key[0][0].casefold(), []).append((order, key))

    def __len__(self) -> int:
        return len(self.terms)

    def __repr__(self) -> str:
        return f"Glossary({self.name!r}, {len(self.terms)} terms)"

    @classmethod
    def load(cls, path: str | Path) -> Glossary:
        """The glossary file `path` (the module docstring's format); a bad file is one `UserError`."""
        path = Path(path)
        if not path.exists():
            raise UserError(f"glossary file not found: {path}")
        if path.is_dir():
            raise UserError(f"glossary {path} is a folder: give a TSV file of term pairs")
        try:
            with open(path, "rb") as f:
                entries = list(_read(utf8_lines(f, path), path))
        except OSError as exc:
            raise UserError(f"cannot read glossary {path}: {exc.strerror or exc}") from None
        return cls(_unique(entries), name=str(path))

    @classmethod
    def from_pairs(cls, pairs: Sequence, *, name: str = "glossary_terms") -> Glossary:
        """Terms given as [source, target] or [source, target, cased (bool)] items (the server's glossary_terms);
        a bad item is one `UserError` naming it."""
        if not isinstance(pairs, (list, tuple)):
            raise UserError(f"{name}: give a list of [source, target] pairs")
        entries = []
        for number, item in enumerate(pairs, start=1):
            where = f"{name} item {number}"
            ok = isinstance(item, (list, tuple)) and len(item) in (2, 3) and all(isinstance(x, str) for x in item[:2])
            if not ok or (len(item) == 3 and not isinstance(item[2], bool)):
                raise UserError(f"{where}: give [source, target] or [source, target, cased], two strings and a bool")
            entries.append((where, _term(where, item[0], item[1], len(item) == 3 and item[2])))
        return cls(_unique(entries), name=name)

    def matches(self, sentence: str) -> list[Match]:
        """The terms `sentence` holds, longest first and non-overlapping, in the order they occur."""
        return find_terms(sentence, [self])

    def targets(self, sentence: str) -> list[str]:
        """The target terms of the terms `sentence` holds, each once, in the order they occur."""
        return term_targets(sentence, [self])

    def _occurrences(self, tokens: list[_Token], rank: int) -> Iterable[tuple]:
        """(sort key, first token, end token, Match) of every occurrence of every term, overlapping or not."""
        folded = [t.text.casefold() for t in tokens]
        for i, first in enumerate(folded):
            for order, key in self._index.get(first, ()):
                n = len(key)
                if i + n > len(tokens) or not _holds(tokens, folded, i, key, self.terms[order].cased):
                    continue
                start, end, term = tokens[i].start, tokens[i + n - 1].end, self.terms[order]
                yield (-(end - start), not term.cased, start, rank, order), i, i + n, Match(start, end, term)


def _holds(tokens: list[_Token], folded: list[str], i: int, key: tuple, cased: bool) -> bool:
    """Whether the term of `key` occurs at token i: its tokens as written (cased) or casefolded, spaced alike."""
    for k, (text, spaced) in enumerate(key):
        token = tokens[i + k]
        if (token.text if cased else folded[i + k]) != text or (k and token.spaced != spaced):
            return False
    return True


def find_terms(sentence: str, glossaries: Sequence[Glossary]) -> list[Match]:
    """The terms of `glossaries` that `sentence` holds (longest first, non-overlapping; ties to the first glossary),
    in the order they occur. Offsets are in the sentence's NFC form."""
    sentence = unicodedata.normalize("NFC", sentence)
    tokens = _tokens(sentence)
    found = sorted(
        (o for rank, g in enumerate(glossaries) if g for o in g._occurrences(tokens, rank)),
        key=lambda o: o[0],
    )
    taken = [False] * len(tokens)
    kept = []
    for _, first, end, match in found:
        if not any(taken[first:end]):
            taken[first:end] = [True] * (end - first)
            kept.append(match)
    return sorted(kept, key=lambda m: m.start)


def term_targets(sentence: str, glossaries: Sequence[Glossary]) -> list[str]:
    """The target terms of the terms `sentence` holds (`find_terms`), each once, in the order they occur."""
    return list(dict.fromkeys(m.term.target for m in find_terms(sentence, glossaries)))


class TermTarget(str):
    """A glossary term's target among a line's constraint phrases (`merged` marks them, in the Python API and in the
    server alike): the search keeps it whole words, and a line whose phrases are all terms gets the glossary's beam
    (steering.py, translator.py); a plain str is a caller's phrase."""

    __slots__ = ()


def merged(phrases: Sequence[str], targets: Sequence[str]) -> list[str]:
    """A line's constraints: the caller's `phrases`, then the glossary's `targets` not among them, as `TermTarget`s."""
    given = {p.strip() for p in phrases}
    return list(phrases) + [TermTarget(t) for t in targets if t not in given]


def as_glossary(glossary: Glossary | str | Path | None) -> Glossary | None:
    """A `Glossary` as it is, a path loaded (`Glossary.load`), None as None."""
    if glossary is None or isinstance(glossary, Glossary):
        return glossary
    if isinstance(glossary, (str, Path)):
        return Glossary.load(glossary)
    raise UserError(f"glossary: give a Glossary or the path of a glossary file, got {type(glossary).__name__}")


def _read(lines: Iterable[str], path: Path) -> Iterable[tuple[str, Term]]:
    """(where, Term) for each term line of a glossary file."""
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path} line {number}"
        columns = line.split("\t")
        if len(columns) not in (2, 3):
            raise UserError(
                f"{where}: {len(columns)} column(s); write 'source term<TAB>target term', optionally <TAB>cased"
            )
        case = columns[2].strip().lower() if len(columns) == 3 else ""
        if case not in CASED and case not in UNCASED:
            raise UserError(f"{where}: the third column is {columns[2]!r}; write cased (or 1) or uncased (or 0)")
        yield where, _term(where, columns[0], columns[1], CASED.get(case, False))


def _term(where: str, source: str, target: str, cased: bool) -> Term:
    for side, text in (("source", source), ("target", target)):
        if not text.strip():
            raise UserError(f"{where}: the {side} term is empty")
        if any(c in text for c in "\t\r\n"):
            raise UserError(f"{where}: the {side} term holds a tab or a line break; a term is one line of text")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(f"{where}: the {side} term holds a lone surrogate (\\ud800-\\udfff), not text") from None
    return Term(source.strip(), target.strip(), bool(cased))


def _unique(entries: list[tuple[str, Term]]) -> list[Term]:
    """The terms, a repeated one dropped; a source given twice (as it matches: case and spacing) with two targets is
    a `UserError` naming both places."""
    seen: dict[tuple, tuple[str, Term]] = {}
    terms = []
    for where, term in entries:
        key = (_key(Term(unicodedata.normalize("NFC", term.source), "", term.cased)), term.cased)
        if key in seen:
            first_where, first = seen[key]
            if first.target != term.target:
                raise UserError(
                    f"{where}: the source term {term.source!r} is already in the glossary ({first_where}) with "
                    f"another target ({first.target!r}, here {term.target!r}); keep one"
                )
            continue
        seen[key] = (where, term)
        terms.append(term)
    return terms
