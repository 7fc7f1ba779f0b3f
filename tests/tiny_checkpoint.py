"""A tiny, untrained but complete checkpoint (model, config, SentencePiece model) for translate/evaluate tests."""

from __future__ import annotations

from pathlib import Path

import torch

from transformer.checkpoint import model_state, save_checkpoint
from transformer.config import from_dict
from transformer.data.tokenizer import PAD_ID, Tokenizer
from transformer.model.transformer import Transformer

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
    config = from_dict(
        {
            "model": dict(
                d_model=16,
                n_heads=2,
                d_ff=24,
                n_encoder_layers=1,
                n_decoder_layers=2,
                dropout=0.0,
                max_positions=MAX_POSITIONS,
            ),
            "data": dict(
                src_lang="xx",
                tgt_lang="yy",
                vocab_size=48,
                test={"src": str(folder / "test.src"), "tgt": str(folder / "test.ref")},
            ),
            "decode": dict(max_len_a=0.0, max_len_b=6, beam_size=2),
        }
    )
    tokenizer = Tokenizer.train(src, tgt, vocab_size=48)
    torch.manual_seed(0)
    model = Transformer.from_config(
        config.model, src_vocab_size=tokenizer.src_vocab_size, tgt_vocab_size=tokenizer.tgt_vocab_size, pad_id=PAD_ID
    )
    with torch.no_grad():  # make EOS likely enough that some outputs end before the length limit
        model.decoder.embedding.weight[3] *= 3
    save_checkpoint(model_state(model, config, tokenizer), folder / "checkpoint.pt")
    return {"checkpoint": folder / "checkpoint.pt", "src": folder / "test.src", "ref": folder / "test.ref"}


def train_step(model, optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    """One teacher-forced update: x (B, S) sources, y (B, T+1) BOS + target + EOS, label smoothing 0.1."""
    from transformer.training.loss import label_smoothed_loss

    loss, _ = label_smoothed_loss(model(x, y[:, :-1]), y[:, 1:], epsilon=0.1, pad_id=PAD_ID)
    optimizer.zero_grad()
    (loss / (y[:, 1:] != PAD_ID).sum()).backward()
    optimizer.step()


def build_trained(folder: Path, *, norm_first: bool, activation: str, steps: int = 150) -> Path:
    """A tiny model trained for a few seconds to reverse word order, so its outputs are peaked and varied.

    Dimensions all differ (d_model 24, 2 heads, d_ff 40, 2 + 3 layers). Written to folder/checkpoint.pt.
    """
    src = sentences(2000, seed=5)
    tgt = [" ".join(reversed(s.split())) for s in src]
    model = dict(norm_first=norm_first, activation=activation)
    return train_tiny(folder, src, tgt, model=model, data=dict(src_lang="xx", tgt_lang="yy"), steps=steps)


def train_tiny(
    folder: Path, src: list[str], tgt: list[str], *, model: dict, data: dict, steps: int, vocab: int = 60
) -> Path:
    """A tiny model (d_model 24, 2 heads, d_ff 40, 2 + 3 layers; `model` and `data` config keys on top) trained
    `steps` updates on the pairs (src, tgt) with a joint vocabulary of `vocab`; written to folder/checkpoint.pt."""
    config = from_dict(
        {
            "model": dict(
                d_model=24,
                n_heads=2,
                d_ff=40,
                n_encoder_layers=2,
                n_decoder_layers=3,
                dropout=0.0,
                max_positions=40,
                **model,
            ),
            "data": dict(vocab_size=vocab, **data),
            "decode": dict(max_len_a=0.0, max_len_b=30, beam_size=4, length_penalty="fairseq", alpha=1.0),
        }
    )
    tokenizer = Tokenizer.train(src, tgt, vocab_size=vocab)
    torch.manual_seed(0)
    model = Transformer.from_config(
        config.model, src_vocab_size=tokenizer.src_vocab_size, tgt_vocab_size=tokenizer.tgt_vocab_size, pad_id=PAD_ID
    )
    src_ids, tgt_ids = tokenizer.encode_src(src), tokenizer.encode_tgt(tgt)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        batch = torch.randint(len(src), (32,), generator=g).tolist()
        S, T = max(len(src_ids[i]) for i in batch), max(len(tgt_ids[i]) for i in batch) + 1
        x = torch.full((32, S), PAD_ID, dtype=torch.long)  # (B, S)
        y = torch.full((32, T + 1), PAD_ID, dtype=torch.long)  # (B, T+1): BOS + pieces + EOS
        for b, i in enumerate(batch):
            x[b, : len(src_ids[i])] = torch.tensor(src_ids[i])
            y[b, : len(tgt_ids[i]) + 2] = torch.tensor([2] + tgt_ids[i] + [3])
        train_step(model, optimizer, x, y)
    save_checkpoint(model_state(model.eval(), config, tokenizer), folder / "checkpoint.pt")
    return folder / "checkpoint.pt"


def build_sibling(checkpoint: Path, folder: Path, *, seed: int) -> Path:
    """Another model for ensembles: `checkpoint`'s config and tokenizer, weights initialised from `seed` (with its
    EOS embedding enlarged as in `build`). Written to folder/checkpoint.pt."""
    state = torch.load(checkpoint, weights_only=True)
    config = from_dict(state["config"])
    tokenizer = Tokenizer.from_bytes(state["tokenizer"])
    torch.manual_seed(seed)
    model = Transformer.from_config(
        config.model, src_vocab_size=tokenizer.src_vocab_size, tgt_vocab_size=tokenizer.tgt_vocab_size, pad_id=PAD_ID
    )
    with torch.no_grad():
        model.decoder.embedding.weight[3] *= 3
    save_checkpoint(model_state(model, config, tokenizer), folder / "checkpoint.pt")
    return folder / "checkpoint.pt"
