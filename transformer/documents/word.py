"""`--format docx`: Word files read and written with python-docx; only the runs' text (and order) changes.

Each paragraph of the body (tables and text boxes included), of every header and of every footer is a segment:
the text of each `w:t` node (a run's text) is a pair around its words, so a run's formatting (bold, a font, a
hyperlink) goes with the target words aligned to its words, within the paragraph; tabs and line breaks part words
and stay in their runs. Where a paragraph's runs stand side by side holding only their formatting and text (the
usual bold or italic words), they follow the translation's word order, a run copied where its words come back
apart; elsewhere (a tab, a field, a bookmark or a hyperlink among them) they keep their order, and a translation
that reorders differently formatted words gives the formatting to the words that keep it. Everything else (styles,
numbering, images, fields' codes, comments, the other parts of the package) is untouched; when no text changes,
the file's own bytes are written back. A file that python-docx cannot open (not a zip, no Word document inside,
broken XML) is one line naming it, and so is one whose parts would unpack past a bound (unpacking.py: a zip bomb),
checked before python-docx unpacks any.
"""

from __future__ import annotations

import bisect
import copy
import io
from collections.abc import Sequence

from transformer.documents.layout import Layout
from transformer.documents.placement import markup_point, spacing
from transformer.documents.rendering import Rendering
from transformer.documents.segments import Atom, Close, Open, Piece, Segment, bad_file
from transformer.documents.unpacking import check_unpacked

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
SPACE = "{http://www.w3.org/XML/1998/namespace}space"
PARTS = ("document.main+xml", "header+xml", "footer+xml")  # the ends of the content types translated
SEPARATORS = (W + "tab", W + "br", W + "cr")


class WordDocument:
    """A .docx file, its paragraphs as segments (see the module docstring). max_unpacked: the most bytes its parts
    may unpack to (unpacking.py; default: 32 times the file's size, at least 8 MiB), checked before any is read."""

    def __init__(self, data: bytes, name: str = "the document", max_unpacked: int | None = None) -> None:
        import docx

        check_unpacked(data, name, max_unpacked)
        self.data = data
        try:
            self.document = docx.Document(io.BytesIO(data))
            parts = [p for p in self.document.part.package.iter_parts() if p.content_type.endswith(PARTS)]
            self._segments = [s for part in parts for s in _paragraphs(part.element)]
        except Exception as exc:  # whatever a broken file makes the reader raise: the file's fault, one line
            reason = (str(exc).splitlines() or [""])[0][:120]
            raise bad_file(name, f"not a Word .docx file ({type(exc).__name__}: {reason})") from None

    def segments(self) -> list[Segment]:
        return self._segments

    def rebuild(self, outputs: Sequence[Sequence[Piece]]) -> bytes:
        changed = False
        for output in outputs:
            chunks = _chunks(output)
            runs = [node.getparent() for node, _ in chunks]
            if len({id(run) for run in runs}) < len(runs) or not _in_place(runs):
                _reorder(chunks)
                changed = True
                continue
            for node, text in chunks:
                if text != (node.text or ""):
                    _set_text(node, text)
                    changed = True
        if not changed:
            return self.data
        out = io.BytesIO()
        self.document.save(out)
        return out.getvalue()


def _in_place(runs: list) -> bool:
    """Whether runs that share a parent come in the order they stand in it."""
    at = [(id(run.getparent()), run.getparent().index(run)) for run in runs if run.getparent() is not None]
    return all(a[1] < b[1] for a, b in zip(at, at[1:]) if a[0] == b[0])


def _set_text(node, text: str) -> None:
    node.text = text
    if text != text.strip():
        node.set(SPACE, "preserve")


def _reorder(chunks: list) -> None:
    """A movable paragraph's runs (`_movable`) rewritten in the order of `chunks` ((w:t node, text)), a run copied
    where it comes back a second time."""
    runs = list({id(node.getparent()): node.getparent() for node, _ in chunks}.values())
    parent = runs[0].getparent()
    at = min(parent.index(run) for run in runs)
    for run in runs:
        parent.remove(run)
    used = set()
    for k, (node, text) in enumerate(chunks):
        run = node.getparent()
        if id(run) in used:
            run = copy.deepcopy(run)
            node = run.find(W + "t")
        used.add(id(node.getparent()))
        _set_text(node, text)
        parent.insert(at + k, run)


def _paragraphs(element) -> list[Segment]:
    segments = []
    for paragraph in element.iter(W + "p"):
        pieces: list[Piece] = []
        texts = []
        for node in paragraph.iter(W + "t", *SEPARATORS):
            if _paragraph_of(node) is not paragraph:
                continue  # a text box's paragraph inside this one: a segment of its own
            if node.tag == W + "t" and node.text:
                pieces += [Open("", handle=node), node.text, Close("")]
                texts.append(node)
            elif node.tag != W + "t":
                pieces.append(Atom("", separates=True))
        if any(isinstance(piece, str) and piece.strip() for piece in pieces):
            info = {"place": place_in_runs, "movable": _movable(texts)}
            segments.append(Segment(pieces, info=info))
    return segments


def _movable(texts: list) -> bool:
    """Whether the runs of these w:t nodes may be reordered and copied: each holds only its formatting and one of
    them, and they stand side by side in one parent with nothing between them (no tab, field, bookmark, ...)."""
    runs = [node.getparent() for node in texts]
    if len({id(run) for run in runs}) != len(runs) or any(run.tag != W + "r" for run in runs):
        return False
    if any(child.tag not in (W + "rPr", W + "t") for run in runs for child in run):
        return False
    parent = runs[0].getparent()
    if any(run.getparent() is not parent for run in runs):
        return False
    at = [parent.index(run) for run in runs]
    return at == list(range(at[0], at[0] + len(runs)))


def place_in_runs(layout: Layout, ranges, translations) -> list[Piece]:
    """The target text shared over the paragraph's runs: each character written from the source goes to its own
    run, each other one to the run of the source word aligned to its word (the first), a space between two runs to
    the one of them whose text starts or ends with one (`_spaces_placed`), the rest to the run of the text before
    it. Where the runs can be moved (`_movable`), they follow the text, a run copied where its words come back
    apart; else they keep their order, and where that order is not the text's, the fewest characters change run."""
    rendering = Rendering(layout, ranges, translations)
    _with_protected(layout, rendering)
    word_of_entry = {i: t for t, (a, b) in enumerate(rendering.word_at) for i in range(a, b)}
    wanted: list[int | None] = []
    for i, unit in enumerate(rendering.origin):
        if unit is not None:
            wanted.append(layout.owner.get(unit))
        elif (t := word_of_entry.get(i)) is not None and rendering.links.sources.get(t):
            first = rendering.links.sources[t][0]
            wanted.append(layout.owner.get(layout.words[first][0]))
        else:
            wanted.append(None)
    if not layout.segment.info.get("movable"):
        runs = _in_order(wanted)
        texts = [[] for _ in layout.spans]
        for run, text in zip(runs, rendering.text):
            texts[run].append(text)
        pieces: list[Piece] = []
        for span, text in zip(layout.spans, texts):  # every run, an emptied one too
            pieces += [layout.units[span.open], "".join(text), layout.units[span.close]]
        return pieces
    return _moved(layout, _spaces_placed(layout, wanted, rendering.text), rendering.text)


def _with_protected(layout: Layout, rendering: Rendering) -> None:
    """The rendering's text with each protected span's text (protection.py) where placement.py puts the atom, a
    space beside it where it stood apart: a span is text of its run here, so it goes into the run's text (the
    rendering's word ranges moved past it)."""
    spans = [u for u, unit in enumerate(layout.units) if isinstance(unit, Atom) and unit.protected]
    inserted: list[tuple[int, list[str], int]] = []  # (where, the entries, their unit), last first
    for u in spans:
        at = markup_point(rendering, u)
        before = next((t[-1] for t in reversed(rendering.text[:at]) if t), " ")
        after = next((t[0] for t in rendering.text[at:] if t), " ")
        left, right = spacing(layout, rendering, u, before, after)
        inserted.append((at, [" "] * left + [layout.units[u].raw] + [" "] * right, u))
    moved = sorted((at, len(entries)) for at, entries, _ in inserted)
    shift = lambda i, strict: sum(n for at, n in moved if at < i or not strict and at == i)
    rendering.word_at = [(a + shift(a, False), b + shift(b, True)) for a, b in rendering.word_at]
    for at, entries, u in sorted(inserted, key=lambda x: (x[0], x[2]), reverse=True):  # at one point: in order
        rendering.text[at:at] = entries
        rendering.origin[at:at] = [u] * len(entries)


def _spaces_placed(layout: Layout, wanted: list[int | None], text: list[str]) -> list[int]:
    """`wanted` with each space between two runs given to the one whose source text starts or ends with a space (the
    one before first; formatted words seldom do), and every other unknown entry to the run of the entry before it
    (the first known, at the start)."""
    edges = [layout.raw_between(span.open + 1, span.close) for span in layout.spans]
    spaced = [text != text.strip() for text in edges]  # runs that part words: a space at an end
    known = [(i, r) for i, r in enumerate(wanted) if r is not None]
    runs, current = [], known[0][1] if known else 0
    for i, run in enumerate(wanted):
        if run is None and text[i].isspace():
            after = next((r for j, r in known if j > i), current)
            run = current if spaced[current] or not spaced[after] else after
        current = run if run is not None else current
        runs.append(current)
    return runs


def _moved(layout: Layout, runs: list[int], text: list[str]) -> list[Piece]:
    """Runs in the order of the text: a pair around each stretch of one run's text (a run may come back several
    times); the runs left with no text after them, emptied."""
    pieces: list[Piece] = []
    for k, (run, entry) in enumerate(zip(runs, text)):
        span = layout.spans[run]
        if k and runs[k - 1] == run:
            pieces[-2] += entry
        else:
            pieces += [layout.units[span.open], entry, layout.units[span.close]]
    for span in layout.spans:
        if span.index not in runs:
            pieces += [layout.units[span.open], "", layout.units[span.close]]
    return pieces


def _in_order(wanted: list[int | None]) -> list[int]:
    """`wanted` (run indices, None: any) made non-decreasing by changing the fewest entries: the longest
    non-decreasing subsequence kept, every other entry taking the run before it (the first kept, at the start)."""
    known = [(i, r) for i, r in enumerate(wanted) if r is not None]
    tails: list[int] = []  # tails[k]: index into `known` of the smallest last run of a kept sequence of k + 1
    before: list[int | None] = []
    for n, (_, run) in enumerate(known):
        k = bisect.bisect_right([known[t][1] for t in tails], run)
        before.append(tails[k - 1] if k else None)
        tails[k : k + 1] = [n]
    kept, n = {}, tails[-1] if tails else None
    while n is not None:
        kept[known[n][0]] = known[n][1]
        n = before[n]
    first = kept[min(kept)] if kept else 0
    runs, current = [], first
    for i in range(len(wanted)):
        current = kept.get(i, current)
        runs.append(current)
    return runs


def _paragraph_of(node):
    parent = node.getparent()
    while parent is not None and parent.tag != W + "p":
        parent = parent.getparent()
    return parent


def _chunks(output: Sequence[Piece]) -> list:
    """[(w:t node, its new text)] in the order of a segment's translated pieces; text outside every pair goes to
    the pair before it (the first, at the start)."""
    chunks: list = []
    pending: list[str] = []
    for piece in output:
        if isinstance(piece, Open):
            chunks.append([piece.handle, "".join(pending)])
            pending = []
        elif isinstance(piece, str):
            if chunks:
                chunks[-1][1] += piece
            else:
                pending.append(piece)
    return [(node, text) for node, text in chunks]
