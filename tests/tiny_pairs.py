"""Tiny models of three pairs for a several-model server (tests/test_serving_pairs.py): Spanish into English and
English into Spanish, word for word over a small lexicon (each the other reversed), and English into `yy`, English
with its word order reversed: a pair reached from Spanish only through English. Each is tiny_checkpoint.py's small
model trained a few seconds, so its outputs are peaked (the same tokens whatever else is decoded beside them)."""

from __future__ import annotations

from pathlib import Path

import torch
from tiny_checkpoint import train_tiny

LEXICON = {  # Spanish -> English; sentences of these words are Spanish or English to a language identifier
    "el": "the",
    "perro": "dog",
    "gato": "cat",
    "casa": "house",
    "come": "eats",
    "bebe": "drinks",
    "agua": "water",
    "pan": "bread",
    "grande": "big",
    "pequeño": "small",
    "viejo": "old",
    "nuevo": "new",
    "y": "and",
    "pero": "but",
    "ahora": "now",
    "siempre": "always",
}


def spanish(n: int, seed: int) -> list[str]:
    """`n` sentences of 2 to 6 words of the lexicon, drawn with `seed`."""
    words = list(LEXICON)
    g = torch.Generator().manual_seed(seed)
    picks = torch.randint(len(words), (n, 7), generator=g).tolist()
    lengths = torch.randint(2, 7, (n,), generator=g).tolist()
    return [" ".join(words[i] for i in row[:k]) for row, k in zip(picks, lengths)]


def english(text: str) -> str:
    return " ".join(LEXICON[word] for word in text.split())


def build_pairs(folder: Path, steps: int = 500) -> dict[str, Path]:
    """{"es-en", "en-es", "en-yy": checkpoint} written under `folder`."""
    es = spanish(2000, seed=7)
    en = [english(line) for line in es]
    yy = [" ".join(reversed(line.split())) for line in en]
    out = {}
    for label, src, tgt in (("es-en", es, en), ("en-es", en, es), ("en-yy", en, yy)):
        source, target = label.split("-")
        (folder / label).mkdir(parents=True, exist_ok=True)
        data = dict(src_lang=source, tgt_lang=target)
        out[label] = train_tiny(folder / label, src, tgt, model={}, data=data, steps=steps, vocab=96)
    return out
