"""Documents translated by a trained model, measured (scripts/benchmark_documents.py): held-out verses wrapped into
each format (paragraphs of 3-8 verses; inline tags around words at random word boundaries; subtitle cues of one
or two lines), translated with `Translator.translate_document`, and checked: every output parses again, the tags
are the source's, the timings are the source's, the chrF of the text without markup against translating the same
verses as plain lines, and in HTML the share of inline tags that enclose exactly the target words aligned to
their source words (against the alignments the translation itself used).

Legend: a paragraph is a list of verse indices; a tag is (paragraph, first word, last word, name) over the
paragraph's whitespace-split words.
"""

from __future__ import annotations

import html
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser

from sacrebleu.metrics import CHRF

from transformer.documents.rendering import Links

INLINE = ("b", "i", "em", "strong", "span")
MARKDOWN_SPECIAL = re.compile(r"[*_`\[\]()<>#\\!|~]")


def paragraphs(count: int, rng: random.Random) -> list[list[int]]:
    """Verses 0..count-1 in order, cut into paragraphs of 3 to 8 verses."""
    groups, start = [], 0
    while start < count:
        size = rng.randint(3, 8)
        groups.append(list(range(start, min(start + size, count))))
        start += size
    return groups


def _spans(words: list[str], rng: random.Random, every: int = 8) -> list[tuple[int, int]]:
    """Non-overlapping word spans of 1-3 words, about one per `every` words, never next to each other."""
    spans, at = [], rng.randint(0, every - 1)
    while at < len(words):
        end = min(at + rng.randint(0, 2), len(words) - 1)
        spans.append((at, end))
        at = end + 2 + rng.randint(0, 2 * every)
    return spans


@dataclass
class Wrapped:
    """A fixture: the document, its paragraphs' verse indices and its inline tags (paragraph, first, last, name)."""

    document: str
    groups: list[list[int]]
    tags: list[tuple[int, int, int, str]]
    cues: list[int] = field(default_factory=list)  # subtitles: each paragraph's number of cues


def wrap_html(verses: list[str], groups: list[list[int]], rng: random.Random) -> Wrapped:
    """One <p> a paragraph, inline tags (b, i, em, strong, span; one in five an <a href>) around random words."""
    blocks, tags = [], []
    for p, group in enumerate(groups):
        words = " ".join(verses[v] for v in group).split()
        out = [html.escape(w, quote=False) for w in words]
        for first, last in _spans(words, rng):
            name = rng.choice(INLINE + ("a",))
            opening = f'<a href="https://example.org/{p}/{first}">' if name == "a" else f"<{name}>"
            out[first] = opening + out[first]  # first may be last: one word
            out[last] += f"</{name}>"
            tags.append((p, first, last, name))
        blocks.append("<p>" + " ".join(out) + "</p>")
    return Wrapped("<html><body>\n" + "\n".join(blocks) + "\n</body></html>\n", groups, tags)


def wrap_markdown(verses: list[str], groups: list[list[int]], rng: random.Random) -> Wrapped:
    """Paragraphs with **strong**, *emphasis* and [links](url) around random words without Markdown's characters."""
    blocks, tags = [], []
    for p, group in enumerate(groups):
        words = " ".join(verses[v] for v in group).split()
        out = list(words)
        for first, last in _spans(words, rng):
            if any(MARKDOWN_SPECIAL.search(w) for w in words[first : last + 1]):
                continue
            name = rng.choice(("strong", "em", "a"))
            opening, closing = {"strong": ("**", "**"), "em": ("*", "*"), "a": ("[", f"](https://example.org/{p})")}[
                name
            ]
            out[first] = opening + out[first]  # first may be last: one word
            out[last] += closing
            tags.append((p, first, last, name))
        blocks.append(" ".join(out))
    return Wrapped("\n\n".join(blocks) + "\n", groups, tags)


def wrap_text(verses: list[str], groups: list[list[int]]) -> Wrapped:
    """Paragraphs separated by a blank line, the verses of one joined by a space."""
    return Wrapped("\n\n".join(" ".join(verses[v] for v in group) for group in groups) + "\n", groups, [])


def wrap_subtitles(verses: list[str], groups: list[list[int]], kind: str, rng: random.Random) -> Wrapped:
    """Each verse one cue, or two (cut at a middle word) one time in two; cues two seconds apart, numbered in SRT."""
    cues, counts = [], []
    for group in groups:
        counts.append(len(cues))
        for v in group:
            words = verses[v].split()
            cut = len(words) // 2 if len(words) > 3 and rng.random() < 0.5 else len(words)
            cues += [" ".join(words[:cut])] + ([" ".join(words[cut:])] if cut < len(words) else [])
        counts[-1] = len(cues) - counts[-1]
    sep = "," if kind == "srt" else "."
    stamp = lambda s: f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}{sep}000"  # noqa: E731
    blocks = [
        (f"{n + 1}\n" if kind == "srt" else "") + f"{stamp(2 * n)} --> {stamp(2 * n + 2)}\n{html.escape(text, False)}"
        for n, text in enumerate(cues)
    ]
    head = "WEBVTT\n\n" if kind == "vtt" else ""
    return Wrapped(head + "\n\n".join(blocks) + "\n", groups, [], counts)


class _Text(HTMLParser):
    """An HTML fragment's text (references resolved) and each inline element's character range in it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text, self.open, self.ranges = "", [], []

    def handle_starttag(self, tag, attrs) -> None:
        if tag in INLINE + ("a",):
            self.open.append((tag, len(self.text)))

    def handle_endtag(self, tag) -> None:
        if self.open and self.open[-1][0] == tag:
            name, start = self.open.pop()
            self.ranges.append((name, start, len(self.text)))

    def handle_data(self, data) -> None:
        self.text += data


def html_blocks(document: str) -> list[_Text]:
    """Each <p>'s text and inline ranges, in order."""
    blocks = []
    for inner in re.findall(r"<p>(.*?)</p>", document, re.S):
        parsed = _Text()
        parsed.feed(inner)
        parsed.close()
        blocks.append(parsed)
    return blocks


def covered_words(text: str, start: int, end: int) -> set[int]:
    """The whitespace-split words of `text` with a character in [start, end)."""
    return {i for i, m in enumerate(re.finditer(r"\S+", text)) if m.start() < end and m.end() > start}


def tag_agreement(wrapped: Wrapped, output: str, calls: list[tuple[str, str, list]]) -> dict:
    """Of the HTML tags whose source words are aligned to some target word: how many enclose exactly the target
    words from the first to the last of those (the rule of docs/documents.md) in the translation the document used;
    and, for the same tags with their words' links hidden, how often the placement's guess for a tag none of whose
    words is aligned (`Links.span`) gives exactly those words (a leave-one-out check of the guess that places the
    unaligned tags). calls: (sentence, translation, alignment) in the order the document sent them, one
    paragraph's after another's."""
    sources, outputs, queue = html_blocks(wrapped.document), html_blocks(output), iter(calls)
    checked = exact = unaligned = guessed = 0
    for p, (source, block) in enumerate(zip(sources, outputs)):
        sentences = _paragraph_calls(len(source.text.split()), queue)
        links = Links(*_links_of(sentences))
        enclosed: dict[str, list[set[int]]] = {}
        for name, start, end in block.ranges:
            enclosed.setdefault(name, []).append(covered_words(block.text, start, end))
        for _, first, last, name in (tag for tag in wrapped.tags if tag[0] == p):
            targets = {t for w in range(first, last + 1) for t in links.targets.get(w, ())}
            if not targets:
                unaligned += 1
                continue
            checked += 1
            wanted = set(range(min(targets), max(targets) + 1))
            exact += wanted in enclosed.get(name, [])
            hidden = Links(*_links_of(sentences, hide=range(first, last + 1)))
            guess = hidden.span(first, last)
            guessed += bool(guess) and set(range(guess[0], guess[-1] + 1)) == wanted
    share = round(exact / checked, 4) if checked else None
    record = {"tags": len(wrapped.tags), "checked": checked, "unaligned": unaligned, "exact": exact, "share": share}
    return record | {"guess_exact": guessed, "guess_share": round(guessed / checked, 4) if checked else None}


def _paragraph_calls(words: int, calls) -> list[tuple[str, str, list]]:
    """The next sentences of `calls` that make up a paragraph of `words` words."""
    found, source_at = [], 0
    while source_at < words:
        found.append(next(calls))
        source_at += len(found[-1][0].split())
    return found


def _links_of(sentences: list[tuple[str, str, list]], hide: range = range(0)) -> tuple[list, list, list]:
    """`Links`' arguments for a paragraph's sentences (word ranges, target counts, alignments), without the links
    of the paragraph's source words in `hide`."""
    ranges, counts, alignments, at = [], [], [], 0
    for sentence, translation, alignment in sentences:
        n = len(sentence.split())
        ranges.append((at, at + n))
        counts.append(len(translation.split()))
        alignments.append([(s, t) for s, t in alignment or [] if at + s not in hide])
        at += n
    return ranges, counts, alignments


def tag_multiset(document: str, format: str) -> Counter:
    """The inline markup's opening marks: HTML start tags with their attributes; Markdown's strong, em and links."""
    if format == "html":
        return Counter(re.findall(r"<(?:b|i|em|strong|span|a)(?:\s[^>]*)?>", document))
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(document)
    return Counter(c.type for t in tokens for c in t.children or [] if c.type.endswith("_open"))


def timings(document: str) -> list[str]:
    """The cue timing lines of an SRT or WebVTT file, in order."""
    return [line for line in document.splitlines() if "-->" in line]


def chrf(hypotheses: list[str], references: list[str]) -> float:
    return round(CHRF().corpus_score(hypotheses, [references]).score, 2)
