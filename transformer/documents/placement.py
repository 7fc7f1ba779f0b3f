"""Markup placed on a translation by word alignment: inline tags travel with the words they held.

With a segment's target laid out (rendering.py), each `Open`/`Close` pair is put around the target words aligned
to the source words it held, as one run from the first such word to the last (where none is aligned, the guess
of rendering.py's `Links.guess`: beside the target of an aligned neighbour, else at the same relative place):
- a tag that stood in a separator kept in place (between sentences, or in a separator written where its words
  went) keeps its place there, so `word <b> next` keeps its spaces; one that stood inside a word written as the
  source's keeps its place in the word; any other opens just before its first target word and closes just after
  its last;
- nesting stays well-formed, and a tag stays within its parent of the source: it is clipped into its parent's
  run, or, lying wholly outside it, takes the parent's nearest word; a sibling whose run lies within another's
  goes within it (re-nested: `<b>x</b> <i>y</i>` whose "x" is aligned around "y" becomes `<b>.. <i>y</i> ..</b>`),
  except in a kept span and a link within a link; where siblings' runs cross, the shorter keeps its words and the
  longer is cut back to its longest run of whole words outside it (one left with none goes within the sibling that
  took its first word, or is an empty pair there); the multiset of tags is always kept;
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
from transformer.documents.segments import Alignment, Atom, Break, Char, Piece, raw


@dataclass
class Node:
    """A span or an atom of the target: its place [start, end] in the rendering's text, its children."""

    unit: int  # the unit of its Open (a span) or of the Atom
    start: int
    end: int
    span: Span | None = None
    keep: bool = False
    link: bool = False  # a link (holds no other link)
    holds_link: bool = False  # it, or markup it holds in the source, is a link
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
                point = markup_point(rendering, u)
                parent.children.append(Node(u, point, point, link=unit.link))
    _mark_links(root)
    _settle(rendering, root.children, root.start, root.end)
    out: list[Piece] = []
    _walk(layout, rendering, root.children, root.start, root.end, out)
    return out


def _mark_links(node: Node) -> bool:
    """Set `holds_link` over the source's tree of nodes; whether `node` holds a link."""
    node.holds_link = any([_mark_links(child) for child in node.children]) or node.link
    return node.holds_link


def _span_node(rendering: Rendering, span: Span) -> Node:
    layout = rendering.layout
    keep, link = layout.units[span.open].keep, layout.units[span.open].link
    if span.words is None:  # holds no word: where it stood when that was written in place, else after a word
        start, end = rendering.home.get(span.open), rendering.home.get(span.close)
        if start is None or end is None:
            start = end = markup_point(rendering, span.open)
        return Node(span.open, start, end, span, keep=True, link=link)
    first, last = span.words
    targets = rendering.links.span(first, last)
    if not targets:  # its sentences' translations are empty
        at = rendering.sentence_at[rendering.links.sentence[first]]
        return Node(span.open, at, at, span, keep=keep, link=link)
    ta, tb = _within_walls(rendering, span, targets)
    start, end = _open_at(rendering, span, ta), _close_at(rendering, span, tb)
    return Node(span.open, start, end, span, keep=keep, link=link)


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


def markup_point(rendering: Rendering, u: int) -> int:
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
    if word is not None and _leads(layout, word, u):  # a protected span glued before its word's text: before it too
        found = links.targets.get(word)
        t = min(found) if found else links.project(word)
        if t is not None:
            return rendering.word_at[t][0]
    before = word if word is not None else layout.separator_of(u) - 1
    if before >= 0 and (t := links.anchor(before)) is not None:
        return rendering.word_at[t][1]
    after = before + 1
    if after < len(layout.words) and (t := links.anchor(after)) is not None:
        return rendering.word_at[t][0]
    return rendering.sentence_at[links.sentence[max(before, 0)]] if layout.words else 0


def _leads(layout: Layout, word: int, u: int) -> bool:
    """Whether unit u of a word stands before every character of it."""
    return not any(isinstance(unit, Char) for unit in layout.units[layout.words[word][0] : u])


def _settle(rendering: Rendering, children: list[Node], lo: int, hi: int) -> None:
    """Clip children into [lo, hi], cut back those that cross a sibling, nest those that lie within one (the module
    docstring), recursively."""
    for child in children:
        _clip(rendering, child, lo, hi)
    spans: list[Node] = []
    for child in sorted(children, key=lambda node: (node.start == node.end, node.end - node.start, node.start)):
        if child.start < child.end:
            _cut(rendering, child, spans, children)
        if child.start < child.end:
            spans.append(child)
        else:  # a point: out of the spans that cannot hold it
            while inside := [n.end for n in spans if n.start < child.start < n.end and not _can_hold(n, child, [])]:
                child.start = child.end = max(inside)
    children[:] = _nest(children)
    for child in children:
        if child.children:
            _settle(rendering, child.children, child.start, child.end)


def _clip(rendering: Rendering, node: Node, lo: int, hi: int) -> None:
    """`node` clipped into [lo, hi]; a span that held words and lies wholly outside takes the nearest word of
    [lo, hi] (its first or its last), so that it still holds one (a kept one, whose words the source's replace,
    does not)."""
    start, end = min(max(node.start, lo), hi), min(max(node.end, node.start, lo), hi)
    words = _whole_words(rendering, lo, hi) if start == end and node.start < node.end and not node.keep else None
    if words and node.span is not None and node.span.words is not None:
        t = words[0] if node.end <= lo else words[1]
        start, end = rendering.word_at[t]
    node.start, node.end = start, end


def _cut(rendering: Rendering, node: Node, spans: list[Node], siblings: list[Node]) -> None:
    """A span cut back to its longest part of whole words outside the (shorter) sibling spans it crosses, until it
    crosses none; one left with no word goes within the sibling that took its first word, if that can hold it,
    else is a point where it starts."""
    while crossing := [n for n in spans if _crosses(n, node, siblings)]:
        parts = [(node.start, node.end)]
        for n in crossing:
            parts = [p for s, e in parts for p in ((s, min(e, n.start)), (max(s, n.end), e)) if p[0] < p[1]]
        words = [w for w in (_whole_words(rendering, s, e) for s, e in parts) if w]
        if words:
            first, last = max(words, key=lambda w: (w[1] - w[0], -w[0]))
            node.start, node.end = rendering.word_at[first][0], rendering.word_at[last][1]
            continue
        hosts = [n for n in crossing if n.start <= node.start < n.end and _can_hold(n, node, siblings)]
        within = hosts and (max(node.start, hosts[0].start), min(node.end, hosts[0].end))
        if not within or within == (node.start, node.end):
            node.end = node.start
            return
        node.start, node.end = within


def _whole_words(rendering: Rendering, start: int, end: int) -> tuple[int, int] | None:
    """The first and last target word wholly within [start, end] (None: no word is)."""
    words = [t for t, (a, b) in enumerate(rendering.word_at) if start <= a and b <= end and a < b]
    return (words[0], words[-1]) if words else None


def _crosses(a: Node, b: Node, siblings: list[Node]) -> bool:
    """Whether two sibling spans overlap without one lying within the other that can hold it."""
    if a.end <= b.start or b.end <= a.start:
        return False
    return not (_within(a, b) and _can_hold(b, a, siblings) or _within(b, a) and _can_hold(a, b, siblings))


def _within(inner: Node, outer: Node) -> bool:
    """Whether `inner` lies within `outer` (a point strictly inside; of two equal spans, the later in the source)."""
    if outer.start == outer.end:
        return False
    if inner.start == inner.end:
        return outer.start < inner.start < outer.end
    same = (inner.start, inner.end) == (outer.start, outer.end)
    return outer.start <= inner.start and inner.end <= outer.end and (not same or outer.unit < inner.unit)


def _can_hold(outer: Node, inner: Node, siblings: list[Node]) -> bool:
    """Whether `outer` may hold `inner`: not where a kept span is written as the source has it, nor a link around
    a link (`inner`'s own, one of its source, or a sibling within it)."""
    if outer.keep:
        return False
    return not outer.link or not (inner.holds_link or any(n.holds_link and _within(n, inner) for n in siblings))


def _nest(children: list[Node]) -> list[Node]:
    """Siblings that no longer cross: each that lies within others that can hold it goes into the smallest of them
    (of equal ones, the later in the source); the rest are returned, each list in its order in the target."""
    top = []
    for child in children:
        hosts = [n for n in children if n is not child and _within(child, n) and _can_hold(n, child, children)]
        if hosts:
            min(hosts, key=lambda n: (n.end - n.start, -n.unit)).children.append(child)
        else:
            top.append(child)
    for node in top:
        _mark_links(node)  # what it holds now
    for node in children:
        node.children.sort(key=_order)
    return sorted(top, key=_order)


def _order(node: Node) -> tuple[int, bool, int]:
    return node.start, node.end > node.start, node.unit


def _walk(layout: Layout, rendering: Rendering, children: list[Node], lo: int, hi: int, out: list[Piece]) -> None:
    position = lo
    for child in children:
        out.extend(rendering.text[position : child.start])
        if child.span is None:
            out.extend(_spaced(layout, rendering, child.unit, child.start, out))
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


def _spaced(layout: Layout, rendering: Rendering, u: int, at: int, out: list[Piece]) -> list[Piece]:
    """An atom, with a space on a side where a protected span that stood apart in the source (whitespace beside it)
    is placed away from its home against a word (`open %s` stays apart, not `open%s`)."""
    before = next((raw(p)[-1] for p in reversed(out) if raw(p)), " ")
    after = next((t[0] for t in rendering.text[at:] if t), " ")
    left, right = spacing(layout, rendering, u, before, after)
    return [" "] * left + [layout.units[u]] + [" "] * right


def spacing(layout: Layout, rendering: Rendering, u: int, before: str, after: str) -> tuple[bool, bool]:
    """Whether a space goes before and after atom u placed between the characters `before` and `after` (see
    `_spaced`): only for a protected span away from its home."""
    unit = layout.units[u]
    if not (isinstance(unit, Atom) and unit.protected) or u in rendering.home:
        return False, False
    return _apart(layout, u - 1, before), _apart(layout, u + 1, after)


def _apart(layout: Layout, v: int, beside: str) -> bool:
    """Whether a space parts a placed span from the character `beside` it in the target: where unit v beside it in
    the source was whitespace, or where the target puts a letter or digit against it and the source did not."""
    if beside.isspace():
        return False
    if _space_at(layout, v):
        return True
    unit = layout.units[v]
    return beside.isalnum() and not (isinstance(unit, Char) and unit.text[:1].isalnum())


def _space_at(layout: Layout, u: int) -> bool:
    """Whether unit u is whitespace (or lies outside the segment)."""
    if not 0 <= u < len(layout.units):
        return True
    unit = layout.units[u]
    return isinstance(unit, Char) and unit.text.isspace() or isinstance(unit, Break)


def _as_written(layout: Layout, start: int, end: int) -> list[Piece]:
    return [unit.raw if isinstance(unit, Char) else unit for unit in layout.units[start:end]]
