"""SentencePiece tokenizer: fixed special ids, text round trip, sequence conventions, serialization."""

from __future__ import annotations

import io
import pickle

import pytest
import sentencepiece as spm

from transformer.data.corpus import read_lines
from transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_PIECES, UNK_ID, Tokenizer, _sample
from transformer.errors import UserError

BIBLE = "data/bible-es-en/train.tsv.xz"  # the bundled corpus, relative to the repository root


@pytest.fixture(scope="module")
def texts(request) -> tuple[list[str], list[str]]:
    """The first 300 verse pairs of the bundled corpus: (Spanish, English)."""
    rows = [line.split("\t") for line in read_lines(request.config.rootpath / BIBLE, limit=300)]
    return [r[1] for r in rows], [r[2] for r in rows]


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def tokenizer(request, texts) -> Tokenizer:
    return Tokenizer.train(*texts, vocab_size=200, model_type=request.param)


def test_special_ids_are_fixed(tokenizer):
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert [tokenizer.src_piece(i) for i in range(4)] == list(SPECIAL_PIECES)
    assert tokenizer.joint and tokenizer.src_vocab_size == tokenizer.tgt_vocab_size == 200


def test_text_round_trips(tokenizer, texts):
    spanish, english = texts
    assert tokenizer.decode_tgt(tokenizer.encode_tgt(english)) == english
    assert tokenizer.decode_tgt(tokenizer.encode_src(spanish)) == spanish  # joint: the EOS is dropped on decode


def test_source_ends_with_eos_and_target_has_no_specials(tokenizer, texts):
    src = tokenizer.encode_src(texts[0][:20])
    tgt = tokenizer.encode_tgt(texts[1][:20])
    assert all(row[-1] == EOS_ID and EOS_ID not in row[:-1] for row in src)
    assert all(not {PAD_ID, BOS_ID, EOS_ID} & set(row) and row for row in tgt)
    assert all(0 <= i < tokenizer.src_vocab_size for row in src + tgt for i in row)


def test_decode_stops_at_first_eos_and_drops_pad_and_bos(tokenizer):
    ids = tokenizer.encode_tgt(["In the beginning", "God created"])
    rows = [[BOS_ID, *ids[0], EOS_ID, *ids[1], EOS_ID, PAD_ID], [*ids[1], PAD_ID, PAD_ID], [EOS_ID, *ids[0]]]
    assert tokenizer.decode_tgt(rows) == ["In the beginning", "God created", ""]


def test_bytes_and_pickle_round_trip(tokenizer, texts):
    blobs = tokenizer.to_bytes()
    assert set(blobs) == {"src", "tgt"} and isinstance(blobs["src"], bytes) and blobs["tgt"] is None
    for copy in (Tokenizer.from_bytes(blobs), pickle.loads(pickle.dumps(tokenizer))):
        assert copy.joint and copy.to_bytes() == blobs
        assert copy.encode_src(texts[0][:10]) == tokenizer.encode_src(texts[0][:10])


def test_training_is_deterministic(texts):
    first = Tokenizer.train(*texts, vocab_size=150, seed=3).to_bytes()
    assert Tokenizer.train(*texts, vocab_size=150, seed=3).to_bytes() == first


def test_separate_vocabularies(texts):
    tokenizer = Tokenizer.train(*texts, vocab_size=180, joint=False)
    blobs = tokenizer.to_bytes()
    assert not tokenizer.joint and blobs["tgt"] is not None and blobs["tgt"] != blobs["src"]
    assert tokenizer.src_vocab_size == tokenizer.tgt_vocab_size == 180
    assert tokenizer.decode_tgt(tokenizer.encode_tgt(texts[1][:20])) == texts[1][:20]
    assert Tokenizer.from_bytes(blobs).encode_tgt(texts[1][:5]) == tokenizer.encode_tgt(texts[1][:5])


@pytest.mark.parametrize("count", [0, 5, 299, 1000])
def test_input_sampling_is_seeded_and_without_replacement(count):
    import numpy as np

    sentences = [f"s{i}" for i in range(300)]
    first = _sample(sentences, count, np.random.default_rng(1))
    assert first == _sample(sentences, count, np.random.default_rng(1))
    assert len(first) == len(set(first)) == (count if 0 < count < 300 else 300)


def test_vocabulary_too_large_is_a_user_error(texts):
    with pytest.raises(UserError, match="could not train a 50000-piece"):
        Tokenizer.train(texts[0][:30], texts[1][:30], vocab_size=50000)


def test_model_with_other_special_ids_is_refused(texts):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts[1]), model_writer=model, vocab_size=100, minloglevel=2)
    with pytest.raises(UserError, match="pad/unk/bos/eos ids"):  # SentencePiece's defaults: unk 0, bos 1, eos 2
        Tokenizer(model.getvalue())
    with pytest.raises(UserError, match="not readable"):
        Tokenizer(b"not a model")


def test_sampled_segmentation_is_seeded_and_keeps_the_text(tokenizer, texts):
    """BPE-dropout / unigram sampling: the same (texts, seed) give the same pieces whatever was encoded before; another
    seed others; every sampled segmentation decodes to the sentence; an id table refuses it."""
    english = texts[1][:50]
    first = tokenizer.encode_tgt(english, (0.1, 7))
    tokenizer.encode_src(texts[0][:10], (0.1, 8))
    assert tokenizer.encode_tgt(english, (0.1, 7)) == first != tokenizer.encode_tgt(english, (0.1, 9))
    assert first != tokenizer.encode_tgt(english) and tokenizer.decode_tgt(first) == english
    assert sum(map(len, first)) > sum(map(len, tokenizer.encode_tgt(english)))
    table = Tokenizer(tokenizer.to_bytes()["src"], table=tokenizer.pieces("src"))
    with pytest.raises(UserError, match="subword_sampling needs"):
        table.encode_src(texts[0][:2], (0.1, 7))
