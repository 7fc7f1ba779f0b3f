"""Characters the vocabulary lacks: unknown-word replacement (decoding/unknown_words.py) on a copy model that
writes <unk> for them, SentencePiece byte fallback (data.spm_byte_fallback) on the same task, and the <unk> report
of data/coverage.py."""

from __future__ import annotations

import collections
import random
from pathlib import Path

import pytest
import torch
from tiny_checkpoint import sentences, train_step

from transformer.api import Translator
from transformer.checkpoint import model_state, save_checkpoint
from transformer.config import from_dict
from transformer.data.coverage import UnknownCounter, character_counts, sentences_meeting, unknown_share
from transformer.data.tokenizer import PAD_ID, Tokenizer
from transformer.decoding.unknown_words import copied_text, replace_unk
from transformer.model.transformer import Transformer

RARE = ["★", "☂", "♞", "♫", "☯"]  # 3 UTF-8 bytes each; in the training text of the copy models, never in the vocab


def with_rare_words(texts: list[str], seed: int) -> list[str]:
    """A fifth of the sentences with one word replaced by a RARE character."""
    rng = random.Random(seed)
    out = []
    for text in texts:
        words = text.split()
        if rng.random() < 0.2:
            words[rng.randrange(len(words))] = rng.choice(RARE)
        out.append(" ".join(words))
    return out


def train_copy_model(folder: Path, tokenizer: Tokenizer, texts: list[str], steps: int = 300) -> Path:
    """A tiny model trained to copy its input (a few seconds), saved as folder/checkpoint.pt."""
    config = from_dict(
        {
            "model": dict(
                d_model=32, n_heads=2, d_ff=48, n_encoder_layers=1, n_decoder_layers=2, dropout=0.0, max_positions=64
            ),
            "data": dict(src_lang="xx", tgt_lang="yy", vocab_size=tokenizer.src_vocab_size),
            "decode": dict(max_len_a=1.0, max_len_b=4, beam_size=2),
        }
    )
    torch.manual_seed(0)
    model = Transformer.from_config(
        config.model, src_vocab_size=tokenizer.src_vocab_size, tgt_vocab_size=tokenizer.tgt_vocab_size, pad_id=PAD_ID
    )
    ids = tokenizer.encode_tgt(texts)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        batch = [ids[i] for i in torch.randint(len(ids), (32,), generator=g).tolist()]
        T = max(len(row) for row in batch) + 2
        x = torch.full((32, T - 1), PAD_ID, dtype=torch.long)  # (B, S): pieces + EOS
        y = torch.full((32, T), PAD_ID, dtype=torch.long)  # (B, T+1): BOS + pieces + EOS
        for b, row in enumerate(batch):
            x[b, : len(row) + 1] = torch.tensor(row + [3])
            y[b, : len(row) + 2] = torch.tensor([2] + row + [3])
        train_step(model, optimizer, x, y)
    save_checkpoint(model_state(model.eval(), config, tokenizer), folder / "checkpoint.pt")
    return folder / "checkpoint.pt"


@pytest.fixture(scope="module")
def unk_copier(tmp_path_factory) -> Path:
    """Its vocabulary is trained on text without the RARE characters, so they are <unk> in its training pairs."""
    clean = sentences(1500, seed=7)
    tokenizer = Tokenizer.train(clean, clean, vocab_size=48)
    return train_copy_model(tmp_path_factory.mktemp("unk"), tokenizer, with_rare_words(clean, seed=8))


def test_replace_unk_marks_in_order():
    assert replace_unk("the  \u2047  cat \u2047 ", ["🍕", "猫"]) == "the 🍕 cat猫"
    assert replace_unk(" \u2047 the", ["★"]) == "★the"
    assert replace_unk("no marks", ["x"]) == "no marks"


def test_copied_text_is_the_unknown_characters_or_the_whole_word():
    pieces, surfaces = ["▁the", "▁", "<unk>", "▁c", "at"], ["the", " ", "🍕", " c", "at"]
    assert copied_text(surfaces, pieces, 2) == "🍕"
    assert copied_text(surfaces, pieces, 4) == "cat"


def test_unknown_share_counts_characters_and_sentences(monkeypatch):
    """Worked by hand: the (joint) vocabulary has the letters of its text only. Source: 7 + 2 + 6 = 15 characters
    besides spaces, of which 🍕 and i are unknown (2/15), in 2 of 3 sentences; target: 8 + 6 + 4 = 18, of which 猫
    and x (2/18), in 1 of 3."""
    tokenizer = Tokenizer.train(["the cat sat on the mat"] * 20, ["el gato"] * 20, vocab_size=30)
    report = unknown_share(tokenizer, ["the 🍕 cat", "hi", "the cat"], ["el 猫 gato x", "el gato", "gato"])
    assert report["src"] == {"characters": pytest.approx(2 / 15), "sentences": pytest.approx(2 / 3)}
    assert report["tgt"] == {"characters": pytest.approx(2 / 18), "sentences": pytest.approx(1 / 3)}
    for batch in (1, 2):  # counted a few sentences at a time, as a streamed corpus is
        monkeypatch.setattr(UnknownCounter, "BATCH", batch)
        assert unknown_share(tokenizer, ["the 🍕 cat", "hi", "the cat"], ["el 猫 gato x", "el gato", "gato"]) == report


# empty texts, an empty list, astral characters (4 UTF-8 bytes), a lone surrogate (as surrogateescape leaves one)
TEXTS = [["the 🍕 cat", "", "hi", "猫 \udcff x", ""], [], [""], ["a\tb\u00a0c", "🍕🍕", "zz"]]


@pytest.mark.parametrize("texts", TEXTS)
def test_character_counts_equal_a_counter(texts):
    codes, counts = character_counts(texts)
    assert dict(zip(map(chr, codes.tolist()), counts.tolist())) == collections.Counter("".join(texts))
    assert list(codes) == sorted(codes)


@pytest.mark.parametrize("texts", TEXTS)
@pytest.mark.parametrize("characters", [set(), {"🍕"}, {"x", "\udcff", "c"}, {"猫", "h", "z", "q"}])
def test_sentences_meeting_equal_a_loop_over_sentences(texts, characters):
    assert sentences_meeting(texts, characters) == sum(not characters.isdisjoint(t) for t in texts)


def test_character_counts_on_random_text():
    rng = random.Random(3)
    alphabet = "ab c\u00e9\u4e00\U0001f355\n"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(12))) for _ in range(300)]
    codes, counts = character_counts(texts)
    assert dict(zip(map(chr, codes.tolist()), counts.tolist())) == collections.Counter("".join(texts))
    for characters in ({"\u4e00"}, {"\U0001f355", "a"}, set(alphabet)):
        assert sentences_meeting(texts, characters) == sum(not characters.isdisjoint(t) for t in texts)


@pytest.mark.slow
def test_replace_unk_restores_characters_the_model_never_saw(unk_copier):
    """The copy model writes <unk> for an emoji and a CJK character (never in its data); --replace-unk copies them
    from the source, through the API, with n-best and with an ensemble (its first model's attention)."""
    t = Translator.from_checkpoint(unk_copier, device="cpu")
    lines = ["the cat 🍕 sat on", "a 猫 ran home", "the old dog"]
    plain = t.translate(lines)
    assert "\u2047" in plain[0] and "\u2047" in plain[1], plain
    restored = t.translate(lines, replace_unk=True)
    assert restored == [replace_unk(plain[0], ["🍕"]), replace_unk(plain[1], ["猫"]), plain[2]]  # the right copies
    assert "🍕" in restored[0] and "猫" in restored[1] and "\u2047" not in "".join(restored)
    assert [h.text for h in t.translate(lines[:1], nbest=2, replace_unk=True)[0]][0] == restored[0]
    ensemble = Translator.from_checkpoint([unk_copier, unk_copier], device="cpu")
    assert ensemble.translate(lines, replace_unk=True) == restored


@pytest.mark.slow
def test_byte_fallback_keeps_rare_characters_through_tokenizer_and_translation(tmp_path):
    """Coverage 0.99 leaves the RARE characters (0.16% of the text each) out of the vocabulary: without byte
    fallback they are <unk>; with it they survive a round trip, and the copy model trained on those pieces
    writes them where the other writes <unk>."""
    texts = with_rare_words(sentences(1500, seed=7), seed=8)
    plain = Tokenizer.train(texts, texts, vocab_size=48, character_coverage=0.99)
    bytes_ = Tokenizer.train(texts, texts, vocab_size=48 + 256, character_coverage=0.99, byte_fallback=True)
    line = "the ★ cat ♞ sat"
    assert plain.decode_tgt(plain.encode_tgt([line])) != [line]
    assert bytes_.decode_tgt(bytes_.encode_tgt([line])) == [line]
    assert unknown_share(plain, texts, texts)["src"]["characters"] > 0
    nothing = {"characters": 0.0, "sentences": 0.0}
    assert unknown_share(bytes_, texts, texts) == {"src": nothing, "tgt": nothing}
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    without = Translator.from_checkpoint(train_copy_model(tmp_path / "a", plain, texts), device="cpu")
    with_bytes = Translator.from_checkpoint(train_copy_model(tmp_path / "b", bytes_, texts), device="cpu")
    lines = ["the ★ cat sat", "a dog ☂ ran home"]
    assert all("\u2047" in text for text in without.translate(lines))
    written = with_bytes.translate(lines)
    assert "★" in written[0] and "☂" in written[1] and "\u2047" not in "".join(written), written
