"""SentencePiece subword vocabulary: one joint model for both languages (the paper's shared vocabulary) or one each.

Paper, section 5.1: "Sentences were encoded using byte-pair encoding, which has a shared source-target vocabulary
of about 37000 tokens" (EN-DE). `Tokenizer.train` builds that (BPE or unigram, joint by default) from raw text.

Special ids are fixed in every model trained here, so the model, the batches and the decoder agree on them:

    PAD_ID = 0  <pad>   padding, ignored by the loss and masked in attention
    UNK_ID = 1  <unk>   a character outside the vocabulary
    BOS_ID = 2  <s>     first token of the decoder input `tgt_in`
    EOS_ID = 3  </s>    last token of every source sequence and of the labels `tgt_out`

Sequence conventions: `encode_src` returns pieces + EOS (what the encoder reads); `encode_tgt` returns the pieces
only, and `transformer.data.batching.collate` builds `tgt_in` = BOS + pieces and `tgt_out` = pieces + EOS from them.
A tokenizer is stored as raw model bytes (`to_bytes`), which is what checkpoints keep.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Sequence

import numpy as np
import sentencepiece as spm

from transformer.errors import UserError

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")

log = logging.getLogger(__name__)


def _load(model: bytes, side: str) -> spm.SentencePieceProcessor:
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model)
    except (RuntimeError, TypeError, OSError) as exc:
        raise UserError(f"the {side} SentencePiece model is not readable ({str(exc).strip()[:200]})") from None
    ids = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
    if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
        raise UserError(
            f"the {side} SentencePiece model has pad/unk/bos/eos ids {ids}; this project needs "
            f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}: train it with transformer-prepare"
        )
    return processor


def _sample(texts: Sequence[str], count: int, rng: np.random.Generator) -> list[str]:
    """`count` sentences drawn without replacement (all of them, in order, when count is 0 or too large)."""
    if count <= 0 or count >= len(texts):
        return list(texts)
    return [texts[i] for i in np.sort(rng.choice(len(texts), size=count, replace=False))]


def _train_model(
    texts: list[str], *, vocab_size: int, model_type: str, character_coverage: float, byte_fallback: bool, seed: int
) -> bytes:
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            byte_fallback=byte_fallback,  # characters outside the vocabulary as <0xNN> byte pieces, not <unk>
            input_sentence_size=0,  # already sampled by the caller, reproducibly
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            pad_piece=SPECIAL_PIECES[0], unk_piece=SPECIAL_PIECES[1],
            bos_piece=SPECIAL_PIECES[2], eos_piece=SPECIAL_PIECES[3],
            num_threads=max(1, min(16, os.cpu_count() or 1)),
            minloglevel=2,
        )  # fmt: skip
    except RuntimeError as exc:  # e.g. "Vocabulary size too high (8000). Please set it to a value <= 1723."
        reason = str(exc).strip().split("] ")[-1]
        raise UserError(f"SentencePiece could not train a {vocab_size}-piece {model_type} model: {reason}") from None
    return model.getvalue()


class Tokenizer:
    """SentencePiece model(s): one joint model for both languages (the paper's shared vocabulary), or one per language.

    `src_model` and `tgt_model` are serialized SentencePiece models; `tgt_model=None` means one joint model.
    """

    def __init__(self, src_model: bytes, tgt_model: bytes | None = None) -> None:
        self._src_model, self._tgt_model = bytes(src_model), None if tgt_model is None else bytes(tgt_model)
        self._src = _load(self._src_model, "source" if tgt_model is not None else "joint")
        self._tgt = self._src if tgt_model is None else _load(self._tgt_model, "target")
        self.joint: bool = tgt_model is None
        self.src_vocab_size: int = self._src.get_piece_size()
        self.tgt_vocab_size: int = self._tgt.get_piece_size()

    # ------------------------------------------------------------------------------------------ building

    @classmethod
    def train(
        cls,
        src_texts: Sequence[str],
        tgt_texts: Sequence[str],
        *,
        vocab_size: int,
        model_type: str = "bpe",
        joint: bool = True,
        input_sentences: int = 0,
        character_coverage: float = 1.0,
        byte_fallback: bool = False,
        seed: int = 1,
    ) -> Tokenizer:
        """Train SentencePiece on raw text (section 5.1: shared source-target BPE).

        joint: one model on both languages (`input_sentences // 2` sentences sampled from each side), else one
        model per language with `vocab_size` pieces each (`input_sentences` sampled per side). 0 = all sentences.
        Empty lines are skipped. The same texts and seed give the same model bytes. byte_fallback: a character
        outside the vocabulary becomes its UTF-8 bytes (256 pieces of the vocabulary) instead of `<unk>`.
        """
        if model_type not in ("bpe", "unigram"):
            raise UserError(f"SentencePiece model_type must be 'bpe' or 'unigram', got {model_type!r}")
        options = dict(vocab_size=vocab_size, model_type=model_type, character_coverage=character_coverage, seed=seed,
                       byte_fallback=byte_fallback)  # fmt: skip
        rng = np.random.default_rng(seed)
        src, tgt = [t for t in src_texts if t], [t for t in tgt_texts if t]
        if not src or not tgt:
            raise UserError("cannot train SentencePiece: the training text is empty on the source or target side")
        if joint:
            per_side = input_sentences // 2 if input_sentences > 0 else 0
            texts = _sample(src, per_side, rng) + _sample(tgt, per_side, rng)
            log.info(
                "training a joint %d-piece SentencePiece %s model on %d sentences", vocab_size, model_type, len(texts)
            )
            return cls(_train_model(texts, **options))
        log.info("training %d-piece SentencePiece %s models, one per language", vocab_size, model_type)
        src_model = _train_model(_sample(src, input_sentences, rng), **options)
        tgt_model = _train_model(_sample(tgt, input_sentences, rng), **options)
        return cls(src_model, tgt_model)

    @classmethod
    def from_bytes(cls, blobs: dict) -> Tokenizer:
        """Inverse of `to_bytes`: {"src": model bytes, "tgt": model bytes or None when joint}."""
        if not isinstance(blobs, dict) or not isinstance(blobs.get("src"), (bytes, bytearray)):
            raise UserError("the stored tokenizer is not a {'src': bytes, 'tgt': bytes | None} mapping")
        return cls(blobs["src"], blobs.get("tgt"))

    def to_bytes(self) -> dict:
        """{"src": bytes, "tgt": bytes | None}: plain bytes, safe for `torch.load(weights_only=True)`."""
        return {"src": self._src_model, "tgt": self._tgt_model}

    def __getstate__(self) -> dict:  # pickled as model bytes (for `datasets.map(num_proc=...)` workers)
        return self.to_bytes()

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["src"], state["tgt"])

    def __repr__(self) -> str:
        kind = "joint" if self.joint else "separate"
        return f"Tokenizer({kind}, src_vocab_size={self.src_vocab_size}, tgt_vocab_size={self.tgt_vocab_size})"

    # ------------------------------------------------------------------------------------------ text <-> ids

    def encode_src(self, texts: list[str]) -> list[list[int]]:
        """Source sentences -> pieces + [EOS_ID], the encoder's input."""
        return self._src.encode(list(texts), out_type=int, add_eos=True)

    def encode_tgt(self, texts: list[str]) -> list[list[int]]:
        """Target sentences -> pieces only (no BOS/EOS; `collate` adds them)."""
        return self._tgt.encode(list(texts), out_type=int)

    def src_surfaces(self, texts: list[str]) -> list[list[str]]:
        """Source sentences -> the characters each of their pieces stands for (as `encode_src` cuts them, EOS left
        out); an `<unk>` piece's are the unknown characters themselves."""
        return [[piece.surface for piece in proto.pieces] for proto in self._src.encode(list(texts), out_type="proto")]

    def unknown_characters(self, characters: Sequence[str], side: str) -> set[str]:
        """Those of `characters` that the `side` ("src" or "tgt") model writes as `<unk>` (none with byte fallback)."""
        model = self._src if side == "src" else self._tgt
        return {c for c, ids in zip(characters, model.encode(list(characters), out_type=int)) if UNK_ID in ids}

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        """Target ids -> text: stops at the first EOS and drops PAD and BOS (e.g. a beam hypothesis as a list)."""
        cleaned = []
        for row in ids:
            row = [int(i) for i in row]
            if EOS_ID in row:
                row = row[: row.index(EOS_ID)]
            cleaned.append([i for i in row if i not in (PAD_ID, BOS_ID)])
        return self._tgt.decode(cleaned)

    def src_piece(self, token_id: int) -> str:
        """The source piece for an id (for debugging and tests)."""
        return self._src.id_to_piece(int(token_id))

    def tgt_piece(self, token_id: int) -> str:
        """The target piece for an id."""
        return self._tgt.id_to_piece(int(token_id))
