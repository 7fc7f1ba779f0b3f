"""A Hugging Face Marian directory built locally, the way the hub has OPUS-MT models (tests/test_hf_import.py).

Two small SentencePiece models with SentencePiece's own ids (unk 0, bos 1, eos 2, as `spm_train` leaves them),
a joint vocab.json in OPUS-MT's order ("</s>" 0, "<unk>" 1, the pieces of both models, "<pad>" last), and a
randomly initialised MarianMTModel: post-LN, swish, a non-zero final_logits_bias, scale_embedding, 2+2 layers, the
decoder started with the pad id, all written by `save_pretrained`.
"""

from __future__ import annotations

import io
import json
import lzma
from pathlib import Path

import sentencepiece as spm
import torch

CORPUS = Path(__file__).resolve().parent.parent / "data" / "bible-es-en" / "dev.tsv.xz"


def corpus(lines: int = 400, skip: int = 0) -> tuple[list[str], list[str]]:
    """Spanish and English verses of the bundled dev books (columns 1 and 2)."""
    with lzma.open(CORPUS, "rt", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for _, line in zip(range(skip + lines), f)][skip:]
    return [r[1] for r in rows], [r[2] for r in rows]


def _spm(texts: list[str], size: int) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=size,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
    )
    return model.getvalue()


def _vocab(src: bytes, tgt: bytes) -> dict[str, int]:
    pieces = ["</s>", "<unk>"]
    for blob in (src, tgt):
        p = spm.SentencePieceProcessor(model_proto=blob)
        pieces += [p.id_to_piece(i) for i in range(p.get_piece_size()) if not (p.is_control(i) or p.is_unknown(i))]
    unique = list(dict.fromkeys(pieces)) + ["<pad>"]
    return {piece: i for i, piece in enumerate(unique)}


def _random_model(vocab: dict[str, int], *, seed: int, activation: str, max_length: int):
    """A MarianMTModel over `vocab` as OPUS-MT's are configured, its weights random and larger than HF's own."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    V, pad = len(vocab), vocab["<pad>"]
    config = MarianConfig(
        vocab_size=V,
        decoder_vocab_size=V,
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=24,
        decoder_ffn_dim=24,
        activation_function=activation,
        max_position_embeddings=256,
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        share_encoder_decoder_embeddings=True,
        dropout=0.1,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():  # larger than HF's std 0.02, so that the logits of different tokens clearly differ
        for name, p in model.named_parameters():
            if not name.endswith("embed_positions.weight") and p.dim() == 2:
                p.normal_(0.0, 0.4)
        model.final_logits_bias.normal_(0.0, 1.0)
    model.generation_config = GenerationConfig(  # as OPUS-MT's generation_config.json
        num_beams=4,
        max_length=max_length,
        bad_words_ids=[[pad]],
        decoder_start_token_id=pad,
        eos_token_id=0,
        pad_token_id=pad,
        forced_eos_token_id=0,
    )
    return model


def build_marian_dir(folder: Path, *, seed: int = 0, activation: str = "swish", max_length: int = 40) -> Path:
    """Write the directory; returns it."""
    from transformers import MarianTokenizer

    es, en = corpus()
    src, tgt = _spm(es, 120), _spm(en, 100)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = _vocab(src, tgt)
    files = folder / "_files"
    files.mkdir()
    (files / "source.spm").write_bytes(src)
    (files / "target.spm").write_bytes(tgt)
    (files / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    model = _random_model(vocab, seed=seed, activation=activation, max_length=max_length)
    model.save_pretrained(folder)
    tok = MarianTokenizer(
        source_spm=str(files / "source.spm"),
        target_spm=str(files / "target.spm"),
        vocab=str(files / "vocab.json"),
        source_lang="es",
        target_lang="en",
    )
    tok.save_pretrained(folder)
    for f in files.iterdir():
        f.unlink()
    files.rmdir()
    return folder
