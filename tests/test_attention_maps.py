"""Attention maps (decoding/attention_maps.py): the data each panel draws (rows sum to 1 over the columns shown,
the mean panel is the mean of the heads, masks respected, long sentences capped), the PNG files read back with
matplotlib at the size the layout asks for, and transformer-translate --attention-maps end to end."""

from __future__ import annotations

import sys

import pytest
import tiny_checkpoint
import torch

from transformer.checkpoint import build_model, load_checkpoint
from transformer.commands import translate as translate_command
from transformer.commands.cli import translate_main
from transformer.data.corpus import read_lines
from transformer.decoding import attention_maps
from transformer.decoding.attention_maps import attention_figures, draw, figure_inches
from transformer.errors import UserError

plt = pytest.importorskip("matplotlib.pyplot")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    paths = tiny_checkpoint.build(tmp_path_factory.mktemp("maps"))
    model, tokenizer, _ = build_model(load_checkpoint(paths["checkpoint"]), "cpu")
    return paths, model.eval(), tokenizer


def _sentence(tokenizer, text: str, target: str):
    return tokenizer.encode_src([text])[0], tokenizer.encode_tgt([target])[0]


def test_every_panel_is_a_distribution_over_the_pieces_shown(tiny):
    """1 encoder layer and 2 decoder layers, 2 heads: 5 figures of 3 panels (mean, head 0, head 1), pieces on the
    axes, each row summing to 1; the decoder's rows attend only to the input before the piece they produced."""
    _, model, tokenizer = tiny
    src_ids, tgt_ids = _sentence(tokenizer, "the cat sat on the mat", "a dog ran home")
    figures = attention_figures(model, tokenizer, src_ids, tgt_ids)
    names = ["encoder_layer0", "decoder_layer0", "decoder_layer1", "cross_layer0", "cross_layer1"]
    assert [f.name for f in figures] == names
    S, T = len(src_ids), len(tgt_ids) + 1  # source pieces + EOS; target pieces + EOS (rows), BOS + pieces (keys)
    shapes = {"encoder": (S, S), "decoder": (T, T), "cross": (T, S)}
    for figure in figures:
        assert [p.title.split(" (")[0] for p in figure.panels] == ["mean over heads", "head 0", "head 1"]
        for panel in figure.panels:
            assert panel.weights.shape == shapes[figure.name.split("_")[0]]
            assert (len(panel.rows), len(panel.columns)) == tuple(panel.weights.shape)
            torch.testing.assert_close(panel.weights.sum(dim=1), torch.ones(panel.weights.size(0)))
        heads = torch.stack([p.weights for p in figure.panels[1:]])
        torch.testing.assert_close(figure.panels[0].weights, heads.mean(dim=0))
    decoder = figures[1].panels[0]
    assert decoder.columns[0] == "<s>" and decoder.rows[-1] == "</s>" and decoder.columns[1:] == decoder.rows[:-1]
    assert torch.all(decoder.weights.triu(diagonal=1) == 0)
    assert figures[3].panels[0].columns == [tokenizer.src_piece(i) for i in src_ids]


def test_a_long_sentence_is_capped_and_its_rows_still_sum_to_1(tiny):
    """max_pieces 4: rows past the 4th dropped; source columns past the 4th summed into a '+N more' column."""
    _, model, tokenizer = tiny
    src_ids, tgt_ids = _sentence(tokenizer, "the cat sat on the mat and the dog ran home", "a dog ran home then")
    full = {f.name: f for f in attention_figures(model, tokenizer, src_ids, tgt_ids)}
    capped = {f.name: f for f in attention_figures(model, tokenizer, src_ids, tgt_ids, max_pieces=4)}
    cross, whole = capped["cross_layer1"].panels[1], full["cross_layer1"].panels[1]
    assert cross.weights.shape == (4, 5) and cross.columns[-1] == f"+{len(src_ids) - 4} more"
    torch.testing.assert_close(cross.weights[:, :4], whole.weights[:4, :4])
    torch.testing.assert_close(cross.weights[:, 4], whole.weights[:4, 4:].sum(dim=1))
    for figure in capped.values():
        assert "first 4 of" in figure.title
        for panel in figure.panels:
            torch.testing.assert_close(panel.weights.sum(dim=1), torch.ones(4))


def test_the_png_opens_at_the_size_of_its_layout(tiny, tmp_path):
    """3 panels in one row; a panel side is max(3 in, 0.2 in a piece + 1.3 in), plus 0.5 in for the title, at 100
    dpi: up to 8 pieces on a side give 3 in panels, 22 pieces 5.7 in ones."""
    _, model, tokenizer = tiny
    short = attention_figures(model, tokenizer, *_sentence(tokenizer, "the cat sat", "a dog"))[0]  # encoder
    assert len(short.panels[0].columns) <= 8 and figure_inches(short) == (9.0, 3.5)
    image = plt.imread(draw(short, tmp_path / "short.png"))
    assert image.shape[:2] == (350, 900)
    words = " ".join(tiny_checkpoint.WORDS[:9])  # 22 pieces with EOS, within the model's 24 positions
    long = attention_figures(model, tokenizer, *_sentence(tokenizer, words, "a dog"))[0]
    n = len(long.panels[0].columns)
    side = max(3.0, 0.2 * n + 1.3)
    assert n == 22 and figure_inches(long) == pytest.approx((3 * side, side + 0.5))
    image = plt.imread(draw(long, tmp_path / "long.png"))
    assert image.shape[:2] == (round((side + 0.5) * 100), round(3 * side * 100))
    assert image[..., :3].min() < 0.5  # something drawn, not a blank canvas


def test_translate_attention_maps_writes_the_figures_of_the_first_lines(tiny, tmp_path, capsys, monkeypatch, caplog):
    paths, _, _ = tiny
    lines = read_lines(paths["src"])[:2]
    monkeypatch.setattr(translate_command, "MAX_MAP_LINES", 2)
    argv = ["--checkpoint", str(paths["checkpoint"]), "--device", "cpu", "--attention-maps", str(tmp_path / "maps")]
    assert translate_main([*argv, lines[0], "", lines[1]]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    names = sorted(p.name for p in (tmp_path / "maps").iterdir())
    kinds = ["cross_layer0", "cross_layer1", "decoder_layer0", "decoder_layer1", "encoder_layer0"]
    assert names == [f"line0_{k}.png" for k in kinds]  # line 1 is empty; line 2 is past the first 2
    assert "drawn for the first 2 lines only" in caplog.text


def test_without_matplotlib_a_one_line_error(tiny, capsys, monkeypatch):
    paths, _, _ = tiny
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    with pytest.raises(UserError, match="pip install matplotlib"):
        attention_maps.require_matplotlib()
    argv = ["--checkpoint", str(paths["checkpoint"]), "--attention-maps", "maps", "the cat"]
    assert translate_main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: attention maps need matplotlib") and err.count("\n") == 1
