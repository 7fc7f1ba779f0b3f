"""Attention maps: what every head of every layer attends to, for one source sentence and its translation, drawn
as heat maps with the pieces on the axes (PNG files; matplotlib, the `plot` extra), as the Annotated Transformer
draws them.

Legend: S source length (pieces + EOS), T target length (pieces + EOS), H heads.

One teacher-forced pass over (source, translation) computes every layer's attention weights explicitly
(alignment.py's `teacher_forced_attention`). One figure per layer and kind, each a grid of panels: the mean over
heads first, then one panel per head.
- encoder: the encoder's self-attention, source pieces (+ `</s>`) on both axes.
- decoder: the decoder's masked self-attention; a row is the step that produced the piece it is labelled with, a
  column a piece of the decoder's input (`<s>` + the translation), so each row attends to the pieces before it.
- cross: the decoder's attention over the source; rows as in `decoder`, columns the source pieces.
A cell is the weight a query (row) gives a key (column); each panel is shaded from 0 (white) to its own largest
weight (darkest), written in its title. Every row sums to 1 over the columns shown.

Long sentences: a figure grows with its pieces (`CELL_INCHES` a piece), up to `max_pieces` rows and columns. Past
that, the rows stop at the first `max_pieces` and the columns past them are summed into one last column labelled
`+N more`, so rows still sum to 1; the figure's title says so.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from transformer.data.tokenizer import EOS_ID
from transformer.decoding.alignment import teacher_forced_attention
from transformer.errors import UserError
from transformer.fileio import atomic_output

log = logging.getLogger(__name__)

MAX_PIECES = 60  # rows and columns drawn per panel before the rest is cut (rows) or summed into one column (keys)
CELL_INCHES = 0.2  # the side of one cell: 7-point piece labels stay legible
LABEL_INCHES = 1.3  # room for the tick labels and the title around each panel's cells
MIN_PANEL_INCHES = 3.0  # the smallest panel side, for short sentences
COLUMNS = 3  # panels per figure row
DPI = 100


KINDS = {
    "encoder": "encoder self-attention (rows: queries, columns: keys)",
    "decoder": "decoder self-attention (rows: the piece each step produced, columns: decoder input)",
    "cross": "decoder attention over the source (rows: the piece each step produced, columns: source)",
}


@dataclass
class Panel:
    """One heat map: weights (rows, columns) float32, each row summing to 1, and the pieces on its axes."""

    title: str
    weights: torch.Tensor  # (R, C)
    rows: list[str]  # the query of each row
    columns: list[str]  # the key of each column


@dataclass
class AttentionFigure:
    """One layer of one kind (encoder, decoder, cross): the mean over heads, then each head."""

    name: str  # file name stem, e.g. "cross_layer0"
    title: str
    panels: list[Panel]


def require_matplotlib() -> None:
    """A `UserError` naming the fix when matplotlib (the `plot` extra) is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UserError(
            "attention maps need matplotlib: pip install matplotlib (from a checkout: pip install -e '.[plot]')"
        ) from None


def _capped(weights: torch.Tensor, rows: list[str], columns: list[str], cap: int):
    """(weights, rows, columns, note) with at most `cap` rows and `cap` + 1 columns: the rows past `cap` dropped,
    the columns past `cap` summed into one labelled '+N more' (so each row still sums to 1)."""
    n_rows, n_columns = weights.shape
    note = []
    if n_rows > cap:
        weights, rows = weights[:cap], rows[:cap]  # (cap, C)
        note.append(f"first {cap} of {n_rows} rows")
    if n_columns > cap:
        rest = weights[:, cap:].sum(dim=1, keepdim=True)  # (R, 1)
        weights = torch.cat([weights[:, :cap], rest], dim=1)  # (R, cap + 1)
        columns = [*columns[:cap], f"+{n_columns - cap} more"]
        note.append(f"columns past the first {cap} summed into the last")
    return weights, rows, columns, "; ".join(note)


def _figure(kind: str, layer: int, weights: torch.Tensor, rows: list[str], columns: list[str], cap: int):
    """An `AttentionFigure` from one layer's weights (H, R, C): the mean over heads, then each head."""
    heads = [("mean over heads", weights.mean(dim=0))] + [(f"head {h}", w) for h, w in enumerate(weights)]
    panels, note = [], ""
    for title, matrix in heads:
        matrix, shown_rows, shown_columns, note = _capped(matrix, rows, columns, cap)
        panels.append(Panel(f"{title} (max {matrix.max():.2f})", matrix, shown_rows, shown_columns))
    title = f"{KINDS[kind]}, layer {layer}" + (f" ({note})" if note else "")
    return AttentionFigure(f"{kind}_layer{layer}", title, panels)


def attention_figures(
    model, tokenizer, src_ids: list[int], tgt_ids: list[int], *, max_pieces: int = MAX_PIECES
) -> list[AttentionFigure]:
    """Every layer's figures for one sentence: src_ids the source pieces + EOS (what the encoder reads), tgt_ids
    the translation's pieces (no BOS, no EOS). Encoder layers first, then decoder self-, then cross-attention."""
    device = next(model.parameters()).device
    src = torch.tensor([src_ids], dtype=torch.long, device=device)  # (1, S)
    attention = teacher_forced_attention(model, src, [tgt_ids], tokenizer.bos_id)
    source = [tokenizer.src_piece(i) for i in src_ids]
    produced = [tokenizer.tgt_piece(i) for i in tgt_ids] + [tokenizer.tgt_piece(EOS_ID)]  # what each step produced
    inputs = ["<s>"] + produced[:-1]  # the decoder's input, BOS first
    axes = {"encoder": (source, source), "decoder": (produced, inputs), "cross": (produced, source)}
    figures = []
    for kind, (rows, columns) in axes.items():
        for layer, weights in enumerate(getattr(attention, kind)):
            figures.append(_figure(kind, layer, weights[0].float().cpu(), rows, columns, max_pieces))  # (H, R, C)
    return figures


def figure_inches(figure: AttentionFigure) -> tuple[float, float]:
    """(width, height) of the drawn figure: `COLUMNS` panels a row, each panel sized for its pieces."""
    R, C = figure.panels[0].weights.shape
    side = lambda n: max(MIN_PANEL_INCHES, n * CELL_INCHES + LABEL_INCHES)  # noqa: E731
    columns = min(COLUMNS, len(figure.panels))
    rows = math.ceil(len(figure.panels) / columns)
    return columns * side(C), rows * side(R) + 0.5  # + room for the figure's title


def draw(figure: AttentionFigure, path: str | Path) -> Path:
    """Write `figure` as a PNG (atomically) of `figure_inches` * `DPI` pixels."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(COLUMNS, len(figure.panels))
    grid_rows = math.ceil(len(figure.panels) / columns)
    fig, axes = plt.subplots(grid_rows, columns, figsize=figure_inches(figure), squeeze=False, layout="constrained")
    for ax in axes.flat[len(figure.panels) :]:
        ax.axis("off")
    for ax, panel in zip(axes.flat, figure.panels):
        ax.imshow(panel.weights.numpy(), cmap="Blues", vmin=0.0, vmax=max(float(panel.weights.max()), 1e-9))
        ax.set_xticks(range(len(panel.columns)), panel.columns, rotation=90, fontsize=7)
        ax.set_yticks(range(len(panel.rows)), panel.rows, fontsize=7)
        ax.set_title(panel.title, fontsize=9)
    fig.suptitle(figure.title, fontsize=10)
    with atomic_output(path, "wb") as f:
        fig.savefig(f, format="png", dpi=DPI)
    plt.close(fig)
    return Path(path)


def write_maps(model, tokenizer, text: str, tgt_ids: list[int], folder: str | Path, prefix: str) -> list[Path]:
    """Draw every figure of source `text` (encoded and truncated as the translator does) and its translation
    `tgt_ids` into folder/{prefix}_{kind}_layer{N}.png; nothing for an empty line."""
    if not text.strip():
        return []
    src_ids = tokenizer.encode_src([text.strip()])[0]
    if len(src_ids) > model.max_positions:
        src_ids = src_ids[: model.max_positions - 1] + [EOS_ID]
    figures = attention_figures(model, tokenizer, src_ids, tgt_ids)
    return [draw(figure, Path(folder) / f"{prefix}_{figure.name}.png") for figure in figures]
