"""training/setup.py's start from a trained model: fine-tuning (train.init_from) and resuming keep the parent's
tokenizer, the vocabulary check compares pieces, init_optimizer carries the schedule on, and existing
SentencePiece models (data.tokenizer, data.src_tokenizer/tgt_tokenizer) are used as they are."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from transformer.checkpoint import load_checkpoint
from transformer.commands.cli import train_main
from transformer.config import load_config
from transformer.data.corpus import load_pairs as read_split
from transformer.data.tokenizer import Tokenizer, tokenizer_from_files
from transformer.errors import UserError
from transformer.training.setup import build_run, load_checked_weights

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs/tiny.yaml"
CORPUS_B = f"{{tsv: {ROOT}/data/bible-es-en/test.tsv.xz, tsv_columns: [1, 2], max_examples: 300}}"


def _args(tmp_path: Path, out: str, *overrides: str) -> list[str]:
    settings = [
        f"train.out_dir={tmp_path / out}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "train.valid_every=0",
        "train.valid_bleu=false",
        *overrides,
    ]
    return ["--config", str(TINY), "--no-progress", *(a for s in settings for a in ("--set", s))]


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Path:
    """A tiny model trained 3 updates on corpus A (the dev books): its checkpoint_last.pt."""
    tmp = tmp_path_factory.mktemp("parent")
    assert train_main(_args(tmp, "a", "train.max_steps=3")) == 0
    return tmp / "a" / "checkpoint_last.pt"


def _config(tmp_path: Path, *overrides: str):
    settings = [
        f"data.train={CORPUS_B}",
        "data.valid=null",
        "data.test=null",
        f"data.cache_dir={tmp_path / 'c'}",
        f"train.out_dir={tmp_path / 'b'}",
        "train.valid_every=0",
        "train.valid_bleu=false",
        *overrides,
    ]
    return load_config(TINY, settings)


def test_fine_tuning_encodes_corpus_b_with_the_parents_tokenizer(parent, tmp_path):
    config = _config(tmp_path, f"train.init_from={parent}")  # the same vocab_size, 300, as the parent's
    run = build_run(config, progress=False)
    theirs = Tokenizer.from_bytes(load_checkpoint(parent)["tokenizer"])
    assert run.data.tokenizer.to_bytes() == theirs.to_bytes()
    sources, _ = read_split(config.data.train, config.data)
    split = run.data.splits["train"]
    expected = theirs.encode_src(sources[:5])
    assert [split.src(i).tolist() for i in range(5)] == expected
    fresh = Tokenizer.train(sources, sources, vocab_size=300)  # what the same settings would train on B alone
    assert fresh.encode_src(sources[:5]) != expected  # so the test above can fail


def test_a_config_naming_another_tokenizer_is_refused(parent, tmp_path, capsys):
    other = tmp_path / "other.model"
    sources, targets = read_split(_config(tmp_path).data.train, _config(tmp_path).data)
    other.write_bytes(Tokenizer.train(sources, targets, vocab_size=300).to_bytes()["src"])
    args = _args(tmp_path, "b", f"train.init_from={parent}", f"data.tokenizer={other}", "train.max_steps=1")
    assert train_main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(other) in err and str(parent) in err


def test_naming_the_parents_own_model_is_accepted(parent, tmp_path):
    own = tmp_path / "own.model"
    own.write_bytes(load_checkpoint(parent)["tokenizer"]["src"])
    run = build_run(_config(tmp_path, f"train.init_from={parent}", f"data.tokenizer={own}"), progress=False)
    assert run.data.tokenizer.to_bytes()["src"] == own.read_bytes()


def test_equal_sizes_with_other_pieces_are_refused(parent, tmp_path):
    config = _config(tmp_path)
    run = build_run(config, progress=False)  # trains its own 300-piece tokenizer on corpus B
    assert run.data.tokenizer.src_vocab_size == load_checkpoint(parent)["vocab"]["src"]
    with pytest.raises(UserError, match="another tokenizer"):
        load_checked_weights(run.model, run.data.tokenizer, parent)


def test_init_optimizer_takes_the_parents_optimizer_and_update_count(parent, tmp_path):
    state = load_checkpoint(parent)
    run = build_run(_config(tmp_path, f"train.init_from={parent}", "train.init_optimizer=true"), progress=False)
    assert run.restored["step"] == state["step"] == 3
    saved = state["optimizer"]["state"][0]["exp_avg"]
    assert torch.equal(run.optimizer.state_dict()["state"][0]["exp_avg"], saved)
    fresh = build_run(
        _config(tmp_path, f"train.init_from={parent}", "train.out_dir=" + str(tmp_path / "f")), progress=False
    )
    assert fresh.restored is None and not fresh.optimizer.state_dict()["state"]


def _spm_file(path: Path, texts: list[str], size: int, coverage: float = 0.9995) -> Path:
    """A model as `spm_train` leaves it: SentencePiece's own ids (unk 0, bos 1, eos 2, no pad)."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, vocab_size=size, minloglevel=2, character_coverage=coverage
    )
    path.write_bytes(model.getvalue())
    return path


def test_own_sentencepiece_models_are_used_as_they_are(tmp_path):
    config = _config(tmp_path)
    sources, targets = read_split(config.data.train, config.data)
    joint = _spm_file(tmp_path / "joint.model", sources + targets, 200)
    tok = tokenizer_from_files(load_config(TINY, [f"data.tokenizer={joint}"]).data)
    processor = spm.SentencePieceProcessor(model_file=str(joint))
    pieces = [
        p if processor.piece_to_id(p) != processor.unk_id() else "<unk>"
        for p in processor.encode(sources[0], out_type=str)
    ]
    assert [tok.src_piece(i) for i in tok.encode_src(sources[:1])[0]] == pieces + ["</s>"]
    assert tok.src_vocab_size == 200 + 1  # its 197 pieces after the four specials (its <unk>, <s>, </s> are ours)
    src, tgt = _spm_file(tmp_path / "es.model", sources, 150, 1.0), _spm_file(tmp_path / "en.model", targets, 120, 1.0)
    two = _config(tmp_path, f"data.src_tokenizer={src}", f"data.tgt_tokenizer={tgt}", "train.max_steps=1")
    run = build_run(two, progress=False)
    tok = run.data.tokenizer
    assert tok.joint and tok.src_vocab_size == tok.tgt_vocab_size  # one id table: share_embeddings holds
    english = spm.SentencePieceProcessor(model_file=str(tgt)).encode(targets[0], out_type=str)
    assert [tok.tgt_piece(i) for i in run.data.splits["train"].tgt(0).tolist()] == english
    assert "<unk>" not in english
    assert tok.decode_tgt(tok.encode_tgt(targets[:3])) == [" ".join(t.split()) for t in targets[:3]]
