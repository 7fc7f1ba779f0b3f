"""Lines in capitals (`decode.fold_capitals`, on by default): a line in ALL CAPS is translated through its
sentence-cased form, and its translation upper-cased.

A model trained on ordinary text has seen few lines in capitals: a heading in capitals segments into pieces it
rarely met and comes out as garbage (the demo model: test chrF 6.0 in ALL CAPS against 38.1 as written,
docs/decoding.md). Folded to sentence case, the line is one the model knows (chrF 36.4), at no cost to the lines
that are not folded; `data.case_augmentation` teaches a model capitals instead, at a cost in training
(docs/training.md).

- ALL CAPS: at least two cased letters, none of them lower case ("CAPÍTULO 1", "Y DIJO DIOS"); folded: lower case
  with its first letter upper case. None of the 28,636 Spanish or English verses of the bundled training set is.
- Title Case is left as it is: it cannot be told from ordinary text by its letters (59 of those 28,636 Spanish
  verses are lists of names, "Gabaón, Rama, Beeroth,", whose folding would lose the names).
- The casing is the line's: a prefix and constraints apply to the folded translation and are upper-cased with it;
  a glossary's terms are matched in the folded line (case-insensitive by default, so as in the original).
"""

from __future__ import annotations


def sentence_case(text: str) -> str:
    """`text` in lower case with its first letter in upper case ("Y DIJO DIOS" -> "Y dijo dios")."""
    low = text.lower()
    first = next((i for i, ch in enumerate(low) if ch.isalpha()), None)
    return low if first is None else low[:first] + low[first].upper() + low[first + 1 :]


def in_capitals(text: str) -> bool:
    """Whether `text` has at least two cased letters and none in lower case."""
    cased = [ch for ch in text if ch.isupper() or ch.islower()]
    return len(cased) >= 2 and not any(ch.islower() for ch in cased)


def fold_capitals(text: str) -> tuple[str, bool]:
    """(the line to translate, whether its translation is to be upper-cased)."""
    return (sentence_case(text), True) if in_capitals(text) else (text, False)
