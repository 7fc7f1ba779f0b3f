"""`--format docx`: Word files read and written with python-docx; only the text of runs changes.

Each paragraph of the body (tables and text boxes included), of every header and of every footer is a segment:
the text of each `w:t` node (a run's text) is a pair around its words, so a run's formatting (bold, a font, a
hyperlink) goes with the target words aligned to its words, within the paragraph; tabs and line breaks part words
and stay in their runs. Everything else (styles, numbering, images, fields' codes, comments, the other parts of
the package) is untouched; when no text changes, the file's own bytes are written back. A file that python-docx
cannot open (not a zip, no Word document inside, broken XML) is one line naming it.
"""

from __future__ import annotations

import bisect
import io
from collections.abc import Sequence

from transformer.documents.layout import Layout
from transformer.documents.rendering import Rendering
from transformer.documents.segments import Atom, Close, Open, Piece, Segment, bad_file

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
SPACE = "{http://www.w3.org/XML/1998/namespace}space"
PARTS = ("document.main+xml", "header+xml", "footer+xml")  # the ends of the content types translated
SEPARATORS = (W + "tab", W + "br", W + "cr")


class WordDocument:
    """A .docx file, its paragraphs as segments (see the module docstring)."""

    def __init__(self, data: bytes, name: str = "the document") -> None:
        import docx

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
            for node, text in _node_texts(output).items():
                if text != (node.text or ""):
                    node.text = text
                    if text != text.strip():
                        node.set(SPACE, "preserve")
                    changed = True
        if not changed:
            return self.data
        out = io.BytesIO()
        self.document.save(out)
        return out.getvalue()


def _paragraphs(element) -> list[Segment]:
    segments = []
    for paragraph in element.iter(W + "p"):
        pieces: list[Piece] = []
        for node in paragraph.iter(W + "t", *SEPARATORS):
            if _paragraph_of(node) is not paragraph:
                continue  # a text box's paragraph inside this one: a segment of its own
            if node.tag == W + "t" and node.text:
                pieces += [Open("", handle=node), node.text, Close("")]
            elif node.tag != W + "t":
                pieces.append(Atom("", separates=True))
        if any(isinstance(piece, str) and piece.strip() for piece in pieces):
            segments.append(Segment(pieces, info={"place": place_in_runs}))
    return segments


def place_in_runs(layout: Layout, ranges, translations) -> list[Piece]:
    """The target text shared over the paragraph's runs, which keep their order: each character written from the
    source goes to its own run, each other one to the run of the source word aligned to its word (the first), or
    of the text before it; where that would put the runs out of order, the fewest characters change run."""
    rendering = Rendering(layout, ranges, translations)
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
    texts = [[] for _ in layout.spans]
    for run, text in zip(_in_order(wanted), rendering.text):
        texts[run].append(text)
    pieces: list[Piece] = []
    for span, text in zip(layout.spans, texts):  # every run, an emptied one too
        pieces += [layout.units[span.open], "".join(text), layout.units[span.close]]
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


def _node_texts(output: Sequence[Piece]) -> dict:
    """{w:t node: its new text} from a segment's translated pieces; text outside every node goes to the node
    before it (the first node, at the start)."""
    texts: dict = {}
    stack, last, pending = [], None, []
    for piece in output:
        if isinstance(piece, Open):
            stack.append(piece.handle)
            texts.setdefault(piece.handle, []).extend(pending)
            pending = []
        elif isinstance(piece, Close):
            last = stack.pop()
        elif isinstance(piece, str):
            node = stack[-1] if stack else last
            (pending if node is None else texts[node]).append(piece)
    return {node: "".join(parts) for node, parts in texts.items()}
