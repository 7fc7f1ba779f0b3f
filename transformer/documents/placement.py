"""Markup placed on a translation by word alignment: inline tags travel with the words they held.

With a segment's target laid out (rendering.py), each `Open`/`Close` pair is put around the target words aligned
to the source words it held, as one run from the first such word to the last (their proportional guesses when
none is aligned):
- a tag that stood in a separator kept in place (between sentences, or in a separator written where its words
  went) keeps its place there, so `word <b> next` keeps its spaces; one that stood inside a word written as the
  source's keeps its place in the word; any other opens just before its first target word and closes just after
  its last;
- nesting stays well-formed and the tree of tags is the source's: a tag is clipped into its parent's run; where
  siblings' runs overlap, the shorter keeps its words and the longer is cut back to its longest part outside it
  (a sibling left with no word of its own becomes an empty pair there; the multiset of tags is kept);
- a pair that held no word (`<a id="x"></a>`, markup around spaces) and an `Atom` stand after the target word
  aligned to the word before them; a pair with `keep=True` (code) writes what it held as written;
- a pair never runs over a required separator (a cue boundary) that it did not hold in the source.
The result is the segment's pieces for the target: strings and the source's own markup objects, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from transformer.documents.layout import Layout, Span
from transformer.documents.rendering import Rendering
from transformer.documents.segments import Alignment, Atom, Char, Piece


@dataclass
class Node:
    """A span or an atom of the target: its place [start, end] in the rendering's text, its children."""

    unit: int  # the unit of its Open (a span) or of the Atom
    start: int
    end: int
    span: Span | None = None
    keep: bool = False
    children: list[Node] = field(default_factory=list)


def place(layout: Layout, ranges, translations: Sequence[tuple[str, Alignment | None]]) -> list[Piece]:
    """The target pieces of a segment from its sentences' word ranges and their translations."""
    rendering = Rendering(layout, ranges, translations)
    root = Node(-1, 0, len(rendering.text))
    nodes: dict[int, Node] = {}
    for span in layout.spans:
        parent = root if span.parent is None else nodes.get(span.parent)
        if parent is None or parent.keep:  # inside a kept span: written as the source has it
            nodes[span.index] = Node(span.open, 0, 0, span, keep=True)
            continue
        node = _span_node(rendering, span)
        nodes[span.index] = node
        parent.children.append(node)
    for u, unit in enumerate(layout.units):
        if isinstance(unit, Atom):
            owner = layout.owner[u]
            parent = root if owner is None else nodes[owner]
            if not parent.keep:  # else written with the kept span that holds it
                point = _point(rendering, u)
                parent.children.append(Node(u, point, point))
    _settle(root.children, root.start, root.end)
    out: list[Piece] = []
    _walk(layout, rendering, root.children, root.start, root.end, out)
    return out


def _span_node(rendering: Rendering, span: Span) -> Node:
    layout = rendering.layout
    keep = layout.units[span.open].keep
    if span.words is None:  # holds no word: where it stood when that was written in place, else after a word
        start, end = rendering.home.get(span.open), rendering.home.get(span.close)
        if start is None or end is None:
            start = end = _point(rendering, span.open)
        return Node(span.open, start, end, span, keep=True)
    first, last = span.words
    targets = rendering.links.span(first, last)
    if not targets:  # its sentences' translations are empty
        at = rendering.sentence_at[rendering.links.sentence[first]]
        return Node(span.open, at, at, span, keep=keep)
    ta, tb = _within_walls(rendering, span, targets)
    return Node(span.open, _open_at(rendering, span, ta), _close_at(rendering, span, tb), span, keep=keep)


def _within_walls(rendering: Rendering, span: Span, targets: list[int]) -> tuple[int, int]:
    """The first and last target word of a span, cut back to one side of each required separator inside that
    the span did not hold in the source (the side with more of its words)."""
    layout, (first, last) = rendering.layout, span.words
    if any(layout.required(k) for k in range(first + 1, last + 1)):
        return targets[0], targets[-1]
    for wall in rendering.walls:
        left, right = [t for t in targets if t < wall], [t for t in targets if t >= wall]
        if left and right:
            targets = left if len(left) >= len(right) else right
    return targets[0], targets[-1]


def _open_at(rendering: Rendering, span: Span, t: int) -> int:
    layout, u = rendering.layout, span.open
    home, word = rendering.home.get(u), layout.word_of_unit.get(u)
    if home is not None and word is not None and rendering.from_source.get(t) == word:
        return home  # inside a word written as the source's
    if home is not None and word is None and rendering.before(t) <= home <= rendering.word_at[t][0]:
        return home  # in the separator kept before its first word
    return rendering.word_at[t][0]


def _close_at(rendering: Rendering, span: Span, t: int) -> int:
    layout, u = rendering.layout, span.close
    home, word = rendering.home.get(u), layout.word_of_unit.get(u)
    if home is not None and word is not None and rendering.from_source.get(t) == word:
        return home
    if home is not None and word is None and rendering.word_at[t][1] <= home <= rendering.after(t):
        return home
    return rendering.word_at[t][1]


def _point(rendering: Rendering, u: int) -> int:
    """Where markup that holds no word goes: where it stood if that was written in place, else after the target
    word aligned to the word before it (before the one aligned to the word after it, at the segment's start),
    never past a required break (a cue boundary) that it did not stand past in the source."""
    if u in rendering.home:
        return rendering.home[u]
    point = _aligned_point(rendering, u)
    for v, at in rendering.required_at.items():
        point = max(point, at + 1) if v < u else min(point, at)
    return point


def _aligned_point(rendering: Rendering, u: int) -> int:
    layout, links = rendering.layout, rendering.links
    word = layout.word_of_unit.get(u)
    before = word if word is not None else layout.separator_of(u) - 1
    if before >= 0 and (t := links.anchor(before)) is not None:
        return rendering.word_at[t][1]
    after = before + 1
    if after < len(layout.words) and (t := links.anchor(after)) is not None:
        return rendering.word_at[t][0]
    return rendering.sentence_at[links.sentence[max(before, 0)]] if layout.words else 0


def _settle(children: list[Node], lo: int, hi: int) -> None:
    """Clip children into [lo, hi], then settle overlaps between siblings (the module docstring), recursively."""
    for child in children:
        child.start = min(max(child.start, lo), hi)
        child.end = min(max(child.end, child.start), hi)
    taken: list[tuple[int, int]] = []
    for child in sorted(children, key=lambda node: (node.end - node.start, node.start, node.unit)):
        child.start, child.end = _free_part(child.start, child.end, taken)
        taken.append((child.start, child.end))
    children.sort(key=lambda node: (node.start, node.end > node.start, node.unit))
    for child in children:
        if child.children:
            _settle(child.children, child.start, child.end)


def _free_part(start: int, end: int, taken: list[tuple[int, int]]) -> tuple[int, int]:
    """The longest part of [start, end] that overlaps no taken interval (the leftmost of equals); with none, or
    for a point, the first place from `start` on that lies inside no taken interval."""
    parts = [(start, end)] if start < end else []
    for a, b in taken:
        parts = [p for s, e in parts for p in ((s, min(e, a)), (max(s, b), e)) if p[0] < p[1]]
    if parts:
        return max(parts, key=lambda p: (p[1] - p[0], -p[0]))
    point = start
    while inside := [b for a, b in taken if a < point < b or (a == point < b and end > start)]:
        point = max(inside)
    return point, point


def _walk(layout: Layout, rendering: Rendering, children: list[Node], lo: int, hi: int, out: list[Piece]) -> None:
    position = lo
    for child in children:
        out.extend(rendering.text[position : child.start])
        if child.span is None:
            out.append(layout.units[child.unit])
            position = child.start
            continue
        out.append(layout.units[child.span.open])
        if child.keep:
            out.extend(_as_written(layout, child.span.open + 1, child.span.close))
        else:
            _walk(layout, rendering, child.children, child.start, child.end, out)
        out.append(layout.units[child.span.close])
        position = child.end
    out.extend(rendering.text[position:hi])


def _as_written(layout: Layout, start: int, end: int) -> list[Piece]:
    return [unit.raw if isinstance(unit, Char) else unit for unit in layout.units[start:end]]
