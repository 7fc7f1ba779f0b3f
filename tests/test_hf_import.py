"""transformer-import --format hf (interop/hf_import.py), checked against Hugging Face's own MarianMTModel on a
Marian directory built here (tests/marian_dir.py: random weights, swish, non-zero final_logits_bias, OPUS-MT's id
layout with the decoder started by the pad id). The oracle is transformers itself: its logits, its `generate`, its
MarianTokenizer; and the export's round trips."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from marian_dir import build_marian_dir, corpus  # noqa: E402

from transformer.checkpoint import build_model, load_checkpoint  # noqa: E402
from transformer.config import DecodeConfig  # noqa: E402
from transformer.data.tokenizer import EOS_ID  # noqa: E402
from transformer.decoding.search import generate  # noqa: E402
from transformer.interop.export import export_checkpoint  # noqa: E402
from transformer.interop.hf_import import import_checkpoint  # noqa: E402
from transformer.model.attention import make_pad_mask  # noqa: E402

SENTENCES = corpus(lines=50, skip=600)[0]  # 50 Spanish verses the SentencePiece models were not trained on
MAX_NEW = 12


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """(Marian dir, HF model, MarianTokenizer, our checkpoint path, our model, tokenizer, config, HF id of ours)."""
    root = tmp_path_factory.mktemp("marian")
    folder = build_marian_dir(root / "opus-mt-es-en")
    hf = transformers.MarianMTModel.from_pretrained(folder).eval()
    hf_tok = transformers.MarianTokenizer.from_pretrained(folder)
    ckpt = root / "imported.pt"
    import_checkpoint(folder, ckpt)
    model, tok, config = build_model(load_checkpoint(ckpt))
    order = torch.tensor([hf_tok.convert_tokens_to_ids(tok.tgt_piece(i)) for i in range(tok.tgt_vocab_size)])
    return folder, hf, hf_tok, ckpt, model, tok, config, order


def _ours(ids: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """HF ids -> ours (order[i] = HF id of our id i)."""
    return torch.argsort(order)[ids]


def test_settings_are_mapped(imported):
    _, hf, _, _, _, tok, config, order = imported
    assert config.model.activation == "silu" and config.model.output_bias and config.model.scale_embedding
    assert not config.model.norm_first and config.model.tie_output
    assert (config.decode.beam_size, config.decode.max_len_a, config.decode.max_len_b) == (4, 0.0, 39)
    assert tok.bos_id == 0 and order[0] == hf.config.pad_token_id == hf.config.decoder_start_token_id
    assert order[EOS_ID] == hf.config.eos_token_id and tok.tgt_piece(EOS_ID) == "</s>"


def test_source_ids_equal_marian_tokenizer(imported):
    _, _, hf_tok, _, _, tok, _, order = imported
    theirs = [torch.tensor(ids) for ids in hf_tok(SENTENCES)["input_ids"]]
    assert [ids.tolist() for ids in map(lambda t: _ours(t, order), theirs)] == tok.encode_src(SENTENCES)


def test_logits_equal_hf_on_a_padded_batch(imported):
    _, hf, hf_tok, _, model, _, _, order = imported
    batch = hf_tok(SENTENCES[:8], text_target=corpus(8, 600)[1], padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()  # padding on the source side
    labels = batch["labels"]
    start = torch.full((labels.size(0), 1), hf.config.decoder_start_token_id)
    tgt_in = torch.cat([start, labels[:, :-1]], dim=1)  # (B, T)
    with torch.no_grad():
        theirs = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=tgt_in)
        ours = model(_ours(batch["input_ids"], order), _ours(tgt_in, order))  # (B, T, V)
    torch.testing.assert_close(ours, theirs.logits[..., order], atol=1e-4, rtol=0)


def _hf_generate(hf, hf_tok, beams: int) -> list[list[int]]:
    batch = hf_tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = hf.generate(
            **batch,
            num_beams=beams,
            do_sample=False,
            max_new_tokens=MAX_NEW,
            early_stopping=True,
            length_penalty=1.0,
            forced_eos_token_id=None,
            bad_words_ids=[[hf.config.pad_token_id]],
        )
    return out.tolist()


def _our_generate(model, tok, beams: int) -> list[list[int]]:
    settings = DecodeConfig(  # generate has no limit on runs of an n-gram
        beam_size=beams, length_penalty="fairseq", alpha=1.0, max_len_a=0.0, max_len_b=MAX_NEW, max_ngram_repeats=0
    )
    rows = tok.encode_src(SENTENCES)
    src = torch.full((len(rows), max(map(len, rows))), model.pad_id)
    for b, ids in enumerate(rows):
        src[b, : len(ids)] = torch.tensor(ids)
    with torch.no_grad():
        hyps = generate(model, src, make_pad_mask(src, model.pad_id), settings, bos_id=tok.bos_id, eos_id=EOS_ID)
    return [h[0].tokens for h in hyps]


@pytest.mark.parametrize("beams", [1, 4])
def test_search_is_token_identical_to_generate(imported, beams):
    _, hf, hf_tok, _, model, tok, _, order = imported
    theirs = _hf_generate(hf, hf_tok, beams)
    ours = _our_generate(model, tok, beams)
    specials = {hf.config.pad_token_id, hf.config.eos_token_id}
    assert [[order[i].item() for i in row] for row in ours] == [[i for i in row if i not in specials] for row in theirs]
    texts = hf_tok.batch_decode(theirs, skip_special_tokens=True)
    assert tok.decode_tgt(ours) == texts


@pytest.mark.parametrize(
    "generation, min_len",
    [({"min_length": 9}, 8), ({"min_new_tokens": 6}, 6), ({"min_length": 4, "min_new_tokens": 6}, 6)],
)
def test_minimum_lengths_are_imported_as_generate_applies_them(imported, tmp_path, generation, min_len):
    """HF bans EOS while the decoder's input, its start token included, is shorter than min_length, and while fewer
    than min_new_tokens are new: greedy search with the imported settings is token-identical to `generate` with
    them (the random model ends most lines within a few tokens, so the minimum decides where they end)."""
    folder = shutil.copytree(imported[0], tmp_path / "copy")
    settings = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**settings, **generation, "num_beams": 1}))
    import_checkpoint(folder, tmp_path / "min.pt")
    model, tok, config = build_model(load_checkpoint(tmp_path / "min.pt"))
    assert config.decode.min_len == min_len
    _, hf, hf_tok, _, _, _, _, order = imported
    batch = hf_tok(SENTENCES[:12], padding=True, return_tensors="pt")
    with torch.no_grad():
        theirs = hf.generate(
            **batch,
            num_beams=1,
            do_sample=False,
            max_new_tokens=MAX_NEW,
            bad_words_ids=[[hf.config.pad_token_id]],
            forced_eos_token_id=None,
            **generation,
        ).tolist()
    rows = tok.encode_src(SENTENCES[:12])
    src = torch.full((len(rows), max(map(len, rows))), model.pad_id)
    for b, ids in enumerate(rows):
        src[b, : len(ids)] = torch.tensor(ids)
    lengths = dict(max_len_a=0.0, max_len_b=MAX_NEW, min_len=config.decode.min_len)
    settings = DecodeConfig(beam_size=1, max_ngram_repeats=0, **lengths)
    with torch.no_grad():
        ours = generate(model, src, make_pad_mask(src, model.pad_id), settings, bos_id=tok.bos_id, eos_id=EOS_ID)
    specials = {hf.config.pad_token_id, hf.config.eos_token_id}
    assert [[order[i].item() for i in h[0].tokens] for h in ours] == [
        [i for i in r if i not in specials] for r in theirs
    ]


def test_round_trip_ours_export_import_is_bit_identical(imported, tmp_path):
    _, _, _, ckpt, model, tok, _, _ = imported
    export_checkpoint(ckpt, "hf", tmp_path / "exported")
    import_checkpoint(tmp_path / "exported", tmp_path / "again.pt")
    again = load_checkpoint(tmp_path / "again.pt")
    first = load_checkpoint(ckpt)
    assert again["model"].keys() == first["model"].keys()
    for key, value in first["model"].items():
        assert torch.equal(again["model"][key], value), key
    assert again["tokenizer"] == first["tokenizer"]
    model2, tok2, _ = build_model(again)
    assert _our_generate(model2, tok2, 4) == _our_generate(model, tok, 4)


def test_round_trip_hf_import_export_gives_equal_logits(imported, tmp_path):
    folder, hf, hf_tok, ckpt, _, _, _, _ = imported
    export_checkpoint(ckpt, "hf", tmp_path / "back")
    hf2 = transformers.MarianMTModel.from_pretrained(tmp_path / "back").eval()
    tok2 = transformers.MarianTokenizer.from_pretrained(tmp_path / "back")
    a = hf_tok(SENTENCES[:6], padding=True, return_tensors="pt")
    b = tok2(SENTENCES[:6], padding=True, return_tensors="pt")
    start_a = torch.full((6, 1), hf.config.decoder_start_token_id)
    start_b = torch.full((6, 1), hf2.config.decoder_start_token_id)
    with torch.no_grad():
        la = hf(**a, decoder_input_ids=torch.cat([start_a, a["input_ids"][:, :5]], 1)).logits
        lb = hf2(**b, decoder_input_ids=torch.cat([start_b, b["input_ids"][:, :5]], 1)).logits
    to_a = torch.tensor([hf_tok.convert_tokens_to_ids(tok2.convert_ids_to_tokens(i)) for i in range(lb.size(-1))])
    torch.testing.assert_close(lb, la[..., to_a], atol=1e-4, rtol=0)
    same = dict(num_beams=4, max_new_tokens=8, early_stopping=True, length_penalty=1.0, forced_eos_token_id=None)
    texts_a = hf_tok.batch_decode(
        hf.generate(**a, bad_words_ids=[[hf.config.pad_token_id]], **same), skip_special_tokens=True
    )
    texts_b = tok2.batch_decode(
        hf2.generate(**b, bad_words_ids=[[hf2.config.pad_token_id]], **same), skip_special_tokens=True
    )
    assert texts_b == texts_a


def _run_import(folder: Path, out: Path, capsys) -> tuple[int, str]:
    from transformer.commands.cli import import_main

    code = import_main(["--format", "hf", str(folder), "--output", str(out)])
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    "damage, expected",
    [
        (lambda d: (d / "source.spm").unlink(), "has no source.spm"),
        (lambda d: (d / "model.safetensors").unlink(), "weights are missing"),
        (lambda d: _edit_config(d, model_type="bart"), "not Marian"),
        (lambda d: _edit_config(d, d_model=None), "no integer d_model"),
        (lambda d: (d / "vocab.json").write_text('{"<unk>": 0, "a": 5}'), "ids are not 0.."),
        (lambda d: _edit_config(d, decoder_ffn_dim=32), "decoder_ffn_dim"),
        (lambda d: _edit_config(d, activation_function="gelu_new"), "activation_function"),
        (lambda d: _edit_config(d, share_encoder_decoder_embeddings=False), "separate encoder and decoder"),
        (lambda d: _edit_config(d, encoder_layers=0), "encoder_layers 0; each must be at least 1"),
        (lambda d: (d / "config.json").write_text("[" * 100_000), "config.json is not readable JSON"),
        (lambda d: _garble_header(d, 2**62), "is not a safetensors file"),
        (lambda d: _garble_header(d, 17), "is not a safetensors file"),
        (lambda d: _edit_weights(d, "model.encoder.layers.0.fc1.weight", lambda w: w[:, :-2]), "has shape"),
        (lambda d: _edit_weights(d, "model.decoder.layers.0.fc2.bias", lambda w: w[:1]), "has shape (1,)"),
        (lambda d: _edit_weights(d, "model.encoder.layers.0.fc1.bias", lambda w: w.long()), "not floating-point"),
        (lambda d: _edit_weights(d, "model.decoder.layers.0.fc1.bias", None), "have no model.decoder.layers.0.fc1"),
        (lambda d: _pickle_instead_of_tensors(d, argparse.Namespace(a=1)), "is not a plain tensor file"),
        (lambda d: _pickle_instead_of_tensors(d, {"weights": [1, 2]}), "is not names to tensors"),
    ],
)
def test_bad_directories_are_one_line_exit_2(imported, tmp_path, capsys, damage, expected):
    folder = shutil.copytree(imported[0], tmp_path / "copy")
    damage(folder)
    code, err = _run_import(folder, tmp_path / "out.pt", capsys)
    assert code == 2 and expected in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out.pt").exists()


def _garble_header(folder: Path, length: int) -> None:
    """model.safetensors with its 8-byte header length replaced: absurd, or pointing into the header's JSON."""
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(length.to_bytes(8, "little") + data[8:])


def _edit_weights(folder: Path, name: str, change) -> None:
    """model.safetensors with tensor `name` changed by `change` (None: removed)."""
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    if change is None:
        del weights[name]
    else:
        weights[name] = change(weights[name]).contiguous()
    save_file(weights, folder / "model.safetensors")


def _pickle_instead_of_tensors(folder: Path, value) -> None:
    """pytorch_model.bin (read when there is no model.safetensors) holding `value`, not a mapping to tensors."""
    (folder / "model.safetensors").unlink()
    torch.save(value, folder / "pytorch_model.bin")


def _edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def test_an_imported_model_translates_scores_aligns_ensembles_and_fine_tunes(imported, tmp_path):
    from transformer import Translator
    from transformer.commands.cli import train_main

    _, hf, hf_tok, ckpt, model, tok, _, _ = imported
    settings = dict(beam_size=4, length_penalty="fairseq", alpha=1.0, max_len_a=0.0, max_len_b=MAX_NEW)
    settings.update(max_ngram_repeats=0)  # as _our_generate
    one = Translator.from_checkpoint(ckpt, **settings)
    texts = one.translate(SENTENCES[:5])
    assert texts == tok.decode_tgt(_our_generate(model, tok, 4)[:5])
    assert Translator.from_checkpoint([ckpt, ckpt], **settings).translate(SENTENCES[:5]) == texts  # an ensemble
    assert all(t.alignment is not None for t in one.translate(SENTENCES[:2], alignment=True))
    english = corpus(3, 600)[1]
    batch = hf_tok(SENTENCES[:3], text_target=english, padding=True, return_tensors="pt")
    with torch.no_grad():  # HF's own log P(target | source), labels as MarianTokenizer gives them (pieces + EOS)
        loss = hf(**batch).logits.log_softmax(-1).gather(2, batch["labels"][..., None].clamp(min=0)).squeeze(2)
    theirs = (loss * (batch["labels"] != hf.config.pad_token_id)).sum(1)
    ours = torch.tensor([s.log_prob for s in one.score(SENTENCES[:3], english)])
    torch.testing.assert_close(ours, theirs, atol=1e-3, rtol=1e-5)
    tsv = tmp_path / "b.tsv"
    es, en = corpus(40, 700)
    tsv.write_text("".join(f"x\t{s}\t{t}\n" for s, t in zip(es, en)), encoding="utf-8")
    settings = [
        f"data.train={{tsv: {tsv}, tsv_columns: [1, 2]}}",
        "data.valid=null",
        "data.test=null",
        f"data.cache_dir={tmp_path / 'c'}",
        f"train.out_dir={tmp_path / 'ft'}",
        f"train.init_from={ckpt}",
        "train.max_steps=2",
        "train.valid_every=0",
        "train.max_tokens=4000",
        "data.vocab_size=50",
    ]
    config = tmp_path / "finetune.yaml"  # no model section: the parent's (an imported model's silu, bias, ...)
    config.write_text("data: {src_lang: es, tgt_lang: en}\ntrain: {update_tokens: 1000}\n", encoding="utf-8")
    assert train_main(["--config", str(config), "--no-progress", *(a for s in settings for a in ("--set", s))]) == 0
    tuned = load_checkpoint(tmp_path / "ft" / "checkpoint_last.pt")
    assert tuned["tokenizer"] == load_checkpoint(ckpt)["tokenizer"] and tuned["step"] == 2
    assert tuned["config"]["model"]["activation"] == "silu" and tuned["config"]["model"]["output_bias"]
    assert not torch.equal(tuned["model"]["output_proj.bias"], load_checkpoint(ckpt)["model"]["output_proj.bias"])


@pytest.mark.parametrize("beams", [1, 4])
def test_ctranslate2_export_of_an_imported_model_is_token_identical(imported, tmp_path, beams):
    ctranslate2 = pytest.importorskip("ctranslate2")
    _, _, _, ckpt, model, tok, _, _ = imported
    export_checkpoint(ckpt, "ctranslate2", tmp_path / "ct2")  # swish, the output bias, the pad id as start
    sources = [[tok.src_piece(i) for i in ids] for ids in tok.encode_src(SENTENCES)]
    results = ctranslate2.Translator(str(tmp_path / "ct2")).translate_batch(
        sources, beam_size=beams, length_penalty=1.0, max_decoding_length=MAX_NEW
    )
    ours = [[tok.tgt_piece(i) for i in row] for row in _our_generate(model, tok, beams)]
    assert [r.hypotheses[0] for r in results] == ours
