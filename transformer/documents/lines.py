"""Protected spans in lines of text (transformer-translate without --format, the Python API, the server's lines).

A line is one segment of plain text translated whole: its protected spans (spans.py) become atoms (protection.py),
the model reads the rest (`ProtectedLine.text`), and `restore` places each span back on the translation by its
word alignment, exactly once, as a document's markup is placed. A line with no span goes to the model as it is,
and comes back untouched; a line with nothing but spans, spaces and punctuation is not translated at all.
"""

from __future__ import annotations

from transformer.documents.layout import Layout
from transformer.documents.placement import place
from transformer.documents.protection import (
    by_position,
    drop_invented,
    nothing_to_translate,
    protect_segment,
    protected_atoms,
)
from transformer.documents.segments import Alignment, Segment, raw
from transformer.documents.spans import Protection


class ProtectedLine:
    """One line with its protected spans masked: `text` goes to the model, `restore` puts the spans back;
    `spans`: (kind, text as written) of each, in order."""

    def __init__(self, line: str, protection: Protection) -> None:
        self.line = line
        segment = protect_segment(Segment([line.strip()]), protection) if line.strip() else None
        atoms = protected_atoms(segment) if segment is not None else []
        self.spans = tuple((atom.protected, atom.raw) for atom in atoms)
        self.layout = Layout(segment) if atoms else None
        self.skip = self.layout is not None and nothing_to_translate(self.layout)
        self.text = line if self.layout is None else "" if self.skip else " ".join(self.layout.texts)

    def restore(self, text: str, alignment: Alignment | None) -> tuple[str, bool]:
        """(the translation with the spans back, whether one was placed by position: no aligned word beside it)."""
        if self.layout is None:
            return text, False
        if self.skip:
            return self.line.strip(), False
        ranges = [(0, len(self.layout.words))]
        text, alignment = drop_invented(text, alignment, {written for _, written in self.spans})
        pieces = place(self.layout, ranges, [(text, alignment)])
        return "".join(raw(piece) for piece in pieces), by_position(self.layout, ranges, [alignment])
