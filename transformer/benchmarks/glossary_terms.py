"""A glossary built from a parallel test set (scripts/build_glossary.py), for measuring glossaries (glossary.py here):
names and frequent content words of the source lines paired with the reference words they co-occur with.

The method, word by word (letters only; a word is counted once per line, lowercased):
1. Candidates: the words of at least `min_count` lines on each side that are not function words. A function word
   is one of the `skip` words found in the most lines of its side, unless it is a name; a name is a word written
   with a capital in at least 90% of its occurrences that do not open the line.
2. Score: for a source word s and a target word t, Dice's coefficient 2 c(s, t) / (c(s) + c(t)) over lines (c: the
   lines holding it), plus `spelling` times their spelling similarity (difflib's ratio, accents and case set
   aside), a dictionary heuristic that picks "Jesús" -> "Jesus" over a word that merely co-occurs.
3. Competitive linking (Melamed 2000, "Models of Translational Equivalence among Words"): the pairs sorted by
   score, best first, each taken unless its source or its target word is taken already, while Dice >= `min_dice`
   and c(s, t) >= `min_count`. So each word is in one pair at most.
4. Each side is written as it is most often written inside its lines (not as a line's first word, unless it is
   only ever that); a name's term is `cased` (matched as written), the others match any case.
"""

from __future__ import annotations

import collections
import difflib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

WORD = re.compile(r"[^\W\d_]+")  # letters only


@dataclass(frozen=True)
class Side:
    """One side's words: the lines holding each (lowercased), how each is written, which are names."""

    lines: list[set[str]]  # per line, its candidate words (lowercased)
    count: collections.Counter  # word -> lines holding it
    written: dict[str, str]  # word -> its most frequent written form
    names: set[str]  # words written with a capital (not counting the line's first word)


def _side(texts: Sequence[str], min_count: int, skip: int) -> Side:
    count, capital, inside = collections.Counter(), collections.Counter(), collections.Counter()
    first, forms = collections.defaultdict(collections.Counter), collections.defaultdict(collections.Counter)
    per_line = []
    for text in texts:
        words = WORD.findall(text)
        for i, word in enumerate(words):
            key = word.lower()
            (forms if i else first)[key][word] += 1
            if i:
                inside[key] += 1
                capital[key] += word[0].isupper() and not word.isupper()
        per_line.append({w.lower() for w in words})
        count.update(per_line[-1])
    names = {w for w in inside if capital[w] >= 0.9 * inside[w]}
    common = {w for w, _ in count.most_common(skip)} - names
    keep = {w for w, c in count.items() if c >= min_count and w not in common and len(w) > 1}
    written = {w: (forms[w] or first[w]).most_common(1)[0][0] for w in keep}  # as written inside lines, if ever
    return Side([line & keep for line in per_line], collections.Counter({w: count[w] for w in keep}), written, names)


def _plain(word: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", word.lower()) if not unicodedata.combining(c))


def build_terms(
    sources: Sequence[str],
    references: Sequence[str],
    *,
    min_count: int = 3,
    min_dice: float = 0.5,
    skip: int = 150,
    spelling: float = 0.3,
) -> list[tuple[str, str, bool]]:
    """(source term, target term, cased) pairs from line-aligned `sources` and `references` (the module docstring's
    method), the most frequent source words first."""
    src, tgt = _side(sources, min_count, skip), _side(references, min_count, skip)
    both = collections.Counter()
    for s_words, t_words in zip(src.lines, tgt.lines):
        both.update((s, t) for s in s_words for t in t_words)
    scored = []
    for (s, t), c in both.items():
        dice = 2 * c / (src.count[s] + tgt.count[t])
        if c >= min_count and dice >= min_dice:
            similar = difflib.SequenceMatcher(None, _plain(s), _plain(t)).ratio()
            scored.append((dice + spelling * similar, s, t))
    linked, used_s, used_t = [], set(), set()
    for _, s, t in sorted(scored, key=lambda x: (-x[0], x[1], x[2])):
        if s not in used_s and t not in used_t:
            used_s.add(s)
            used_t.add(t)
            linked.append((s, t))
    linked.sort(key=lambda pair: (-src.count[pair[0]], pair[0]))
    return [(src.written[s], tgt.written[t], s in src.names) for s, t in linked]


def glossary_text(terms: Sequence[tuple[str, str, bool]], header: Sequence[str] = ()) -> str:
    """The glossary file: `header` lines as comments, then one `source<TAB>target[<TAB>cased]` line per term."""
    lines = [f"# {line}" for line in header]
    lines += [f"{s}\t{t}\tcased" if cased else f"{s}\t{t}" for s, t, cased in terms]
    return "".join(line + "\n" for line in lines)
