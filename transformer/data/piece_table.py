"""One id table over SentencePiece models that are used by their pieces, not their own ids (the OPUS-MT layout).

A model trained here numbers its pieces itself, with the fixed special ids of `tokenizer.py`. A model from
elsewhere (your own `spm_train`, or an OPUS-MT model's `source.spm` and `target.spm` with their joint
`vocab.json`) numbers them its own way, and two models have two numberings. Then the text is cut into pieces by the
SentencePiece model(s) and the pieces are looked up in one table, as Hugging Face's `MarianTokenizer` does:

    table[0] pad   table[1] unk   table[2] <s> (or a piece)   table[3] </s>   table[4:] pieces

PAD, UNK and EOS keep the project's ids (0, 1, 3); a piece outside the table is UNK. The decoder's first input is
`bos_id`: 2 (`<s>`) in tables built here, the pad id 0 in models imported from Marian (where it starts the decoder
and no `<s>` exists, so id 2 is an ordinary piece).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sentencepiece as spm

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3  # as tokenizer.py (which imports this module)
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")
LANGUAGE_CODE = re.compile(">>.+<<")  # a multilingual model's target-language token at the start, e.g. ">>fra<<"
SPIECE_UNDERLINE = "\u2581"


def pieces_of(processor: spm.SentencePieceProcessor) -> list[str]:
    """The ordinary pieces of a SentencePiece model, in its id order (its unknown and control pieces left out)."""
    return [
        processor.id_to_piece(i)
        for i in range(processor.get_piece_size())
        if not (processor.is_control(i) or processor.is_unknown(i))
    ]


def build_table(processors: Sequence[spm.SentencePieceProcessor]) -> list[str]:
    """The specials, then each model's pieces in its own order, each piece once (the source model's first)."""
    table, seen = list(SPECIAL_PIECES), set(SPECIAL_PIECES)
    for processor in processors:
        for piece in pieces_of(processor):
            if piece not in seen:
                table.append(piece)
                seen.add(piece)
    return table


class PieceTable:
    """pieces <-> ids through one table; `pieces[i]` is the piece of id i."""

    def __init__(self, pieces: Sequence[str], bos_id: int = BOS_ID) -> None:
        self.pieces = [str(p) for p in pieces]
        self.index: dict[str, int] = {}
        for i, piece in enumerate(self.pieces):
            self.index.setdefault(piece, i)
        self.bos_id = bos_id
        self.special_ids = {PAD_ID, UNK_ID, EOS_ID} | ({BOS_ID} if bos_id == BOS_ID else set())

    def __len__(self) -> int:
        return len(self.pieces)

    def encode(self, processor: spm.SentencePieceProcessor, texts: Sequence[str], *, eos: bool) -> list[list[int]]:
        """Texts -> ids (+ EOS): a leading language code (">>fra<<") kept whole, the rest cut by `processor`."""
        rows = []
        for text in texts:
            match = LANGUAGE_CODE.match(text)
            code = [match.group(0)] if match else []
            pieces = code + processor.encode(LANGUAGE_CODE.sub("", text), out_type=str)
            rows.append([self.index.get(p, UNK_ID) for p in pieces] + ([EOS_ID] if eos else []))
        return rows

    def decode(self, processor: spm.SentencePieceProcessor, ids: Sequence[int]) -> str:
        """Ids (already cut at EOS) -> text, the special ids left out, as `MarianTokenizer.decode(...,
        skip_special_tokens=True)`: the pieces through `decode_pieces`, any remaining '\u2581' as a space."""
        pieces = [self.pieces[i] for i in ids if i not in self.special_ids and i != self.bos_id]
        return processor.decode_pieces(pieces).replace(SPIECE_UNDERLINE, " ").strip()
