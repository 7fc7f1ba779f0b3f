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

SentencePiece models made elsewhere (`data.tokenizer`, `data.src_tokenizer` / `data.tgt_tokenizer`, or an
imported OPUS-MT model) are used as they are, their pieces looked up in one id table (`piece_table.py`).
"""

from __future__ import annotations

import io
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from transformer.data.piece_table import BOS_ID, EOS_ID, PAD_ID, SPECIAL_PIECES, UNK_ID, PieceTable, build_table
from transformer.errors import UserError

log = logging.getLogger(__name__)


def _load(model: bytes, side: str, own_ids: bool = True) -> spm.SentencePieceProcessor:
    """A SentencePiece processor; own_ids: its special ids must be the project's (it numbers the pieces itself)."""
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model)
    except (RuntimeError, TypeError, OSError) as exc:
        raise UserError(f"the {side} SentencePiece model is not readable ({str(exc).strip()[:200]})") from None
    if not own_ids:
        return processor
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
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            pad_piece=SPECIAL_PIECES[0],
            unk_piece=SPECIAL_PIECES[1],
            bos_piece=SPECIAL_PIECES[2],
            eos_piece=SPECIAL_PIECES[3],
            num_threads=max(1, min(16, os.cpu_count() or 1)),
            minloglevel=2,
        )
    except RuntimeError as exc:  # e.g. "Vocabulary size too high (8000). Please set it to a value <= 1723."
        reason = str(exc).strip().split("] ")[-1]
        raise UserError(f"SentencePiece could not train a {vocab_size}-piece {model_type} model: {reason}") from None
    return model.getvalue()


def _sampling(sample: tuple[float, int] | None, table: PieceTable | None = None) -> dict:
    """SentencePiece's options for a sampled segmentation (Kudo 2018 for unigram models, BPE-dropout for BPE
    models: alpha is then the probability of dropping a merge), seeded. SentencePiece draws from a thread-local
    generator seeded when the thread starts: a list is encoded on fresh threads, so with one thread the same
    (texts, seed) give the same pieces, whatever was encoded before, in one process (from SentencePiece 0.2.2 on,
    absl salts the seed once per process: another process samples other pieces). Not through an id table (`table`)."""
    if sample is None:
        return {}
    if table is not None:
        raise UserError(
            "data.subword_sampling needs a SentencePiece model with this project's ids (one trained by "
            "transformer-prepare), not one used through an id table"
        )
    alpha, seed = sample
    spm.set_random_generator_seed(seed)
    return {"enable_sampling": True, "alpha": alpha, "nbest_size": -1, "num_threads": 1}


def seeds_repeat_across_processes() -> bool:
    """Whether SentencePiece's seeded sampling gives the same pieces in another process: up to 0.2.1 its generator
    is a seeded `std::mt19937`; from 0.2.2 an `absl::BitGen`, whose seeds absl salts once per process."""
    return tuple(int(part) for part in re.findall(r"\d+", spm.__version__)[:3]) < (0, 2, 2)


class Tokenizer:
    """SentencePiece model(s): one joint model for both languages (the paper's shared vocabulary), or one per language.

    `src_model` and `tgt_model` are serialized SentencePiece models; `tgt_model=None` means one joint model.
    `table`: the pieces of one shared id table (`piece_table.py`) when the models' own ids are not used; `bos_id`
    is then the decoder's first input (2, or 0 for a model imported from Marian). `joint`: one id space.
    """

    def __init__(
        self, src_model: bytes, tgt_model: bytes | None = None, *, table: list[str] | None = None, bos_id: int = BOS_ID
    ) -> None:
        self._src_model, self._tgt_model = bytes(src_model), None if tgt_model is None else bytes(tgt_model)
        self.table = None if table is None else PieceTable(table, bos_id)
        self._src = _load(self._src_model, "source" if tgt_model is not None else "joint", table is None)
        self._tgt = self._src if tgt_model is None else _load(self._tgt_model, "target", table is None)
        self.joint: bool = tgt_model is None or table is not None
        self.bos_id: int = bos_id if table is not None else BOS_ID
        self.src_vocab_size: int = len(self.table) if self.table else self._src.get_piece_size()
        self.tgt_vocab_size: int = len(self.table) if self.table else self._tgt.get_piece_size()

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
        Empty lines are skipped. The same texts and seed give the same model bytes. byte_fallback: see `_train_model`.
        """
        if model_type not in ("bpe", "unigram"):
            raise UserError(f"SentencePiece model_type must be 'bpe' or 'unigram', got {model_type!r}")
        options = dict(vocab_size=vocab_size, model_type=model_type, character_coverage=character_coverage, seed=seed)
        options["byte_fallback"] = byte_fallback
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
        """Inverse of `to_bytes`: {"src": model bytes, "tgt": model bytes or None when joint} (+ "table", "bos")."""
        if not isinstance(blobs, dict) or not isinstance(blobs.get("src"), (bytes, bytearray)):
            raise UserError("the stored tokenizer is not a {'src': bytes, 'tgt': bytes | None} mapping")
        return cls(blobs["src"], blobs.get("tgt"), table=blobs.get("table"), bos_id=blobs.get("bos", BOS_ID))

    def to_bytes(self) -> dict:
        """{"src": bytes, "tgt": bytes | None} (+ "table": the id table's pieces, "bos": the decoder's first id,
        when there is a table): plain data, safe for `torch.load(weights_only=True)`."""
        blobs = {"src": self._src_model, "tgt": self._tgt_model}
        return blobs if self.table is None else {**blobs, "table": list(self.table.pieces), "bos": self.bos_id}

    def pieces(self, side: str = "tgt") -> list[str]:
        """Every piece of the `side` ("src" or "tgt") vocabulary, in id order: what two tokenizers compare."""
        piece, size = (self.src_piece, self.src_vocab_size) if side == "src" else (self.tgt_piece, self.tgt_vocab_size)
        return [piece(i) for i in range(size)]

    def __reduce__(self):  # pickled as model bytes (for `datasets.map(num_proc=...)` workers)
        return Tokenizer.from_bytes, (self.to_bytes(),)

    def __repr__(self) -> str:
        kind = "joint" if self.table is None and self.joint else "separate" if self.table is None else "table"
        return f"Tokenizer({kind}, src_vocab_size={self.src_vocab_size}, tgt_vocab_size={self.tgt_vocab_size})"

    # ------------------------------------------------------------------------------------------ text <-> ids

    def encode_src(self, texts: list[str], sample: tuple[float, int] | None = None) -> list[list[int]]:
        """Source sentences -> pieces + [EOS_ID], the encoder's input; sample: (alpha, seed) (`_sampling`)."""
        if self.table is not None:
            return self.table.encode(self._src, texts, eos=True, **_sampling(sample, self.table))
        return self._src.encode(list(texts), out_type=int, add_eos=True, **_sampling(sample))

    def encode_tgt(self, texts: list[str], sample: tuple[float, int] | None = None) -> list[list[int]]:
        """Target sentences -> pieces only (no BOS/EOS; `collate` adds them). sample: as `encode_src`'s."""
        if self.table is not None:
            return self.table.encode(self._tgt, texts, eos=False, **_sampling(sample, self.table))
        return self._tgt.encode(list(texts), out_type=int, **_sampling(sample))

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        """Target ids -> text: stops at the first EOS and drops PAD and BOS (e.g. a beam hypothesis as a list)."""
        cleaned = []
        for row in ids:
            row = [int(i) for i in row]
            if EOS_ID in row:
                row = row[: row.index(EOS_ID)]
            cleaned.append([i for i in row if i not in (PAD_ID, self.bos_id)])
        if self.table is not None:  # MarianTokenizer's decoding: special ids (UNK too) left out
            return [self.table.decode(self._tgt, row) for row in cleaned]
        return self._tgt.decode(cleaned)

    def src_piece(self, token_id: int) -> str:
        """The source piece for an id (for debugging and tests)."""
        return self.table.pieces[int(token_id)] if self.table else self._src.id_to_piece(int(token_id))

    def tgt_piece(self, token_id: int) -> str:
        """The target piece for an id."""
        return self.table.pieces[int(token_id)] if self.table else self._tgt.id_to_piece(int(token_id))


def source_surfaces(tokenizer: Tokenizer, texts: list[str]) -> list[list[str]]:
    """Source sentences -> the characters each of their pieces stands for (as `encode_src` cuts them, EOS left out);
    an `<unk>` piece's are the unknown characters themselves."""
    protos = tokenizer._src.encode(list(texts), out_type="proto")
    return [[piece.surface for piece in proto.pieces] for proto in protos]


def read_model_file(path: str, what: str) -> bytes:
    """The bytes of a SentencePiece model file named in a config (`what`: the setting), or a one-line error."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"{what}: cannot read the SentencePiece model {path} ({exc.strerror or exc})") from None


def tokenizer_from_files(data) -> Tokenizer | None:
    """The tokenizer a `DataConfig` names with `tokenizer` (one joint model) or `src_tokenizer`/`tgt_tokenizer`
    (two models, one id table), used as it is; None when it names none (then one is trained).

    A joint model with the project's special ids (one from transformer-prepare) numbers the pieces itself; any
    other model, and always a pair, goes through an id table of its pieces (`piece_table.build_table`).
    """
    if data.tokenizer is not None:
        model = read_model_file(data.tokenizer, "data.tokenizer")
        try:
            return Tokenizer(model)
        except UserError:  # other special ids: the model is used through a table of its pieces
            return Tokenizer(model, table=build_table([_load(model, "joint", own_ids=False)]))
    if data.src_tokenizer is None:
        return None
    src = read_model_file(data.src_tokenizer, "data.src_tokenizer")
    tgt = read_model_file(data.tgt_tokenizer, "data.tgt_tokenizer")
    table = build_table([_load(src, "source", own_ids=False), _load(tgt, "target", own_ids=False)])
    return Tokenizer(src, tgt, table=table)
