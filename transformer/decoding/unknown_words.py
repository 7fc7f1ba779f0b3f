"""Unknown-word replacement (Luong et al. 2015, "Addressing the Rare Word Problem in Neural Machine Translation";
fairseq's `--replace-unk`): each `<unk>` of a translation becomes the source text it is aligned to.

Legend: S source length (pieces + EOS, padded), N hypotheses.

How: one teacher-forced pass over (source, hypothesis) gives the cross-attention of one decoder layer (the last by
default, as `--alignment` reads it; alignment.py), averaged over its heads; the step that produced an `<unk>` links
it to the source piece it attends most (the source EOS excluded). What is copied: when that source piece is an
`<unk>` itself, exactly the characters it stands for (an emoji, a CJK character, ...); otherwise the whole source
word the piece belongs to. In the text, SentencePiece writes each `<unk>` as " ⁇ "; the copy takes its place and
one space on each side of the mark (the pieces' own spaces stay). An ensemble reads its first model's attention.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from transformer.data.tokenizer import UNK_ID
from transformer.decoding.alignment import teacher_forced_attention, word_indices

UNK_MARK = re.compile(" ?\u2047 ?")  # how SentencePiece's decode writes one <unk>: " ⁇ "


def unk_sources(model, src: torch.Tensor, hypotheses: Sequence[tuple[int, Sequence[int]]], *, layer: int, bos_id: int):
    """For each hypothesis (sentence index into src (B, S), target ids without BOS and EOS): the source piece (its
    index, EOS excluded) that each of its `<unk>`s attends most in decoder layer `layer`, in order."""
    todo = [n for n, (_, ids) in enumerate(hypotheses) if UNK_ID in ids]
    found: list[list[int]] = [[] for _ in hypotheses]
    if not todo:
        return found
    rows = torch.tensor([hypotheses[n][0] for n in todo], device=src.device)
    sources = src.index_select(0, rows)  # (N', S)
    attention = teacher_forced_attention(model, sources, [hypotheses[n][1] for n in todo], bos_id)
    cross = attention.cross[layer].float().mean(dim=1).cpu()  # (N', T, S) the mean over heads
    real = (sources != model.pad_id).sum(dim=1).tolist()  # pieces + EOS per source
    for i, n in enumerate(todo):
        positions = [t for t, token in enumerate(hypotheses[n][1]) if token == UNK_ID]
        found[n] = cross[i, positions, : real[i] - 1].argmax(dim=-1).tolist()
    return found


def copied_text(surfaces: Sequence[str], pieces: Sequence[str], index: int) -> str:
    """What replaces an `<unk>` aligned to source piece `index`: its characters if it is an `<unk>` (its piece
    '<unk>'), else its whole word. surfaces: the source pieces' characters, pieces: their names."""
    if pieces[index] == "<unk>":
        return surfaces[index].strip()
    words = word_indices(pieces)
    word = words[index]
    return "".join(s for s, w in zip(surfaces, words) if w == word and word is not None).strip()


def replace_unk(text: str, copies: Sequence[str]) -> str:
    """`text` with its `<unk>` marks replaced, in order, by `copies` (one per mark; a missing copy leaves the mark)."""
    copies = iter(copies)
    return UNK_MARK.sub(lambda mark: next(copies, mark.group(0)), text)


def restore_unknown(model, tokenizer, src: torch.Tensor, flat, texts: Sequence[str], surfaces) -> list[str]:
    """texts of hypotheses `flat` (sentence index into src (B, S), target ids), each <unk> replaced by what it is
    aligned to in the last decoder layer of `model` (one `Transformer`); surfaces: per sentence, its source
    pieces' characters (`tokenizer.source_surfaces`)."""
    picks = unk_sources(model, src, flat, layer=len(model.decoder.layers) - 1, bos_id=tokenizer.bos_id)
    out = []
    for (b, _), text, sources in zip(flat, texts, picks):
        if sources:
            pieces = [tokenizer.src_piece(i) for i in src[b].tolist() if i != model.pad_id][:-1]
            text = replace_unk(text, [copied_text(surfaces[b], pieces, s) for s in sources])
        out.append(text)
    return out
