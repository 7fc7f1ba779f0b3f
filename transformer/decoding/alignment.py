"""Word alignments from the decoder's attention over the source, in Pharaoh format (`0-0 1-2 2-1`), as fairseq's
`--print-alignment` and OpenNMT-py's `report_align` write them.

Legend: B batch (sentences), S source length (pieces + EOS, padded), T target length, H heads, N hypotheses.

How, for one hypothesis:
- After the search, one teacher-forced pass over (source, hypothesis) computes the attention weights explicitly
  (`Transformer.forward(..., return_attention=True)`); the search itself, and its incremental `decode_step`, are
  untouched, so decoding is as fast as without alignments. The pass costs about one more encoder and decoder run
  over the batch.
- Which attention: one decoder layer's attention over the encoder memory, averaged over its heads; by default the
  last decoder layer, as fairseq's `--print-alignment` takes it. Garg et al. (2019, "Jointly Learning to Align
  and Translate with Transformer Models") found the penultimate layer the best aligned of 6-layer translation
  models (`layer=-2` takes it). On the small copy and reversal models of tests/test_alignment.py the last layer
  is the better aligned (links on the diagonal, 2 decoder layers, 400 updates, 5 data seeds: 91-100% from the
  last layer, 44-86% from the penultimate; 3 and 6 layers likewise). The demo model has one decoder layer.
- The row of the step that produced target piece t (its query is the piece before t) links t to the source piece
  it attends most. EOS is excluded on both sides (the step that produced EOS, and the source EOS, on which many
  rows park their attention), as fairseq's `extract_hard_alignment` excludes it.
- Pieces are joined into words: a piece starting with SentencePiece's '▁' starts a word (`word_indices`). Links
  between words are deduplicated and sorted: `i-j` is source word i, target word j, both counted from 0 among
  the whitespace-separated words of the (normalised) input line and of the translation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from transformer.data.tokenizer import BOS_ID
from transformer.errors import UserError

WORD_START = "\u2581"  # '▁', SentencePiece's mark for the space before a word


def resolve_layer(layer: int | None, n_decoder_layers: int) -> int:
    """`layer` (None: the last; negative counts from the last) as an index in [0, n_decoder_layers)."""
    if layer is None:
        return n_decoder_layers - 1
    if not -n_decoder_layers <= layer < n_decoder_layers:
        raise UserError(
            f"alignment layer {layer} does not exist: the model has {n_decoder_layers} decoder layer(s); "
            f"use 0 to {n_decoder_layers - 1} (or -1 for the last)"
        )
    return layer % n_decoder_layers


def word_indices(pieces: Sequence[str]) -> list[int | None]:
    """The word each SentencePiece piece belongs to, counted from 0: a piece starting with '▁' starts a word, any
    other continues the current one (the first piece starts word 0 either way). A bare '▁' followed by no piece of
    its word (the next starts a word too, or it is last) is a space, in no word: None.

    ["▁The", "▁cat", "s", "▁"] -> [0, 1, 1, None]
    """
    indices: list[int | None] = []
    word = -1
    for n, piece in enumerate(pieces):
        following = pieces[n + 1] if n + 1 < len(pieces) else WORD_START
        if piece == WORD_START and following.startswith(WORD_START):
            indices.append(None)
            continue
        if piece.startswith(WORD_START) or word < 0:
            word += 1
        indices.append(word)
    return indices


def word_links(src_pieces: Sequence[str], tgt_pieces: Sequence[str], attention: torch.Tensor) -> list[tuple[int, int]]:
    """Sorted, distinct (source word, target word) links from attention (T', S') over pieces, T' >= len(tgt_pieces)
    and S' >= len(src_pieces): row t (the step that produced target piece t) links t to its most attended source
    piece; columns past the source pieces (EOS, padding) and rows past the target pieces (EOS) are left out."""
    if not src_pieces or not tgt_pieces:
        return []
    src_words, tgt_words = word_indices(src_pieces), word_indices(tgt_pieces)
    best = attention[: len(tgt_pieces), : len(src_pieces)].argmax(dim=-1).tolist()  # (T,) source piece per piece
    links = {(src_words[s], tgt_words[t]) for t, s in enumerate(best)}
    return sorted((i, j) for i, j in links if i is not None and j is not None)


def pharaoh(links: Sequence[tuple[int, int]]) -> str:
    """[(0, 0), (1, 2)] -> '0-0 1-2' (empty for no links)."""
    return " ".join(f"{i}-{j}" for i, j in links)


def teacher_forced_attention(model, src: torch.Tensor, targets: Sequence[Sequence[int]], bos_id: int = BOS_ID):
    """One teacher-forced pass with the attention weights: src (N, S) ids, targets N lists of ids (no BOS, no
    EOS) -> `AttentionWeights` over tgt_in = BOS + target, padded to T = longest + 1 (row t is the step that
    produced target piece t, row len(target) the one that produced EOS)."""
    T = max(len(ids) for ids in targets) + 1
    tgt_in = torch.full((len(targets), T), model.pad_id, dtype=torch.long)  # (N, T)
    tgt_in[:, 0] = bos_id
    for n, ids in enumerate(targets):
        tgt_in[n, 1 : len(ids) + 1] = torch.tensor(list(ids), dtype=torch.long)
    with torch.no_grad():
        _, attention = model(src, tgt_in.to(src.device), project=False, return_attention=True)
    return attention


def align(
    model, tokenizer, src: torch.Tensor, hypotheses: Sequence[tuple[int, Sequence[int]]], *, layer: int
) -> list[list[tuple[int, int]]]:
    """Word links for each hypothesis. src (B, S) the padded source ids (pieces + EOS) the search read;
    hypotheses (sentence index into src, target ids without BOS and EOS); layer: the decoder layer (0-based)."""
    if not hypotheses:
        return []
    rows = torch.tensor([b for b, _ in hypotheses], device=src.device)
    targets = [list(ids) for _, ids in hypotheses]
    attention = teacher_forced_attention(model, src.index_select(0, rows), targets, tokenizer.bos_id)
    cross = attention.cross[layer].float().mean(dim=1).cpu()  # (N, T, S): the mean over heads
    sources = src.index_select(0, rows).tolist()
    links = []
    for n, ids in enumerate(targets):
        src_ids = [i for i in sources[n] if i != model.pad_id][:-1]  # the pieces, without EOS
        src_pieces = [tokenizer.src_piece(i) for i in src_ids]
        links.append(word_links(src_pieces, [tokenizer.tgt_piece(i) for i in ids], cross[n]))
    return links
