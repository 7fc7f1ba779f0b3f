"""A tiny, untrained but complete checkpoint (model, config, SentencePiece model) for translate/evaluate tests."""

from __future__ import annotations

from pathlib import Path

import torch

from transformer.checkpoint import model_state, save_checkpoint
from transformer.config import from_dict
from transformer.model import Transformer
from transformer.tokenizer import PAD_ID, Tokenizer

WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "ran",
    "on",
    "under",
    "mat",
    "house",
    "red",
    "small",
    "big",
    "old",
    "new",
    "and",
    "then",
    "slowly",
    "quickly",
    "home",
]
MAX_POSITIONS = 24


def sentences(n: int, seed: int) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    picks = torch.randint(len(WORDS), (n, 6), generator=g).tolist()
    lengths = torch.randint(2, 7, (n,), generator=g).tolist()
    return [" ".join(WORDS[i] for i in row[:k]) for row, k in zip(picks, lengths)]


def build(folder: Path) -> dict[str, Path]:
    """Write checkpoint.pt, parallel test files and a config with a `data.test` split into `folder`."""
    src, tgt = sentences(40, seed=1), sentences(40, seed=2)
    (folder / "test.src").write_text("\n".join(src[:12]) + "\n", encoding="utf-8")
    (folder / "test.ref").write_text("\n".join(tgt[:12]) + "\n", encoding="utf-8")
    config = from_dict({
        "model": dict(d_model=16, n_heads=2, d_ff=24, n_encoder_layers=1, n_decoder_layers=2, dropout=0.0,
                      max_positions=MAX_POSITIONS),
        "data": dict(src_lang="xx", tgt_lang="yy", vocab_size=48,
                     test={"src": str(folder / "test.src"), "tgt": str(folder / "test.ref")}),
        "decode": dict(max_len_a=0.0, max_len_b=6, beam_size=2),
    })  # fmt: skip
    tokenizer = Tokenizer.train(src, tgt, vocab_size=48)
    torch.manual_seed(0)
    model = Transformer.from_config(
        config.model, src_vocab_size=tokenizer.src_vocab_size, tgt_vocab_size=tokenizer.tgt_vocab_size, pad_id=PAD_ID
    )
    with torch.no_grad():  # make EOS likely enough that some outputs end before the length limit
        model.decoder.embedding.weight[3] *= 3
    save_checkpoint(model_state(model, config, tokenizer), folder / "checkpoint.pt")
    return {"checkpoint": folder / "checkpoint.pt", "src": folder / "test.src", "ref": folder / "test.ref"}
