"""transformer-export: Hugging Face Marian / Pegasus and CTranslate2 compute what our model computes.

The references are the other libraries themselves (`transformers`, `ctranslate2`), run on the exported files; the
tests skip when those packages are absent (`pip install -e '.[export]'`). The models are tiny ones trained for a
few seconds here to reverse word order (tests/tiny_checkpoint.py), so their distributions are peaked but not
trivial: one post-LN ReLU model (exported as Marian) and one pre-LN GELU model (exported as Pegasus).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import math

import pytest
import torch
from tiny_checkpoint import build_trained, sentences

from transformer.checkpoint import build_model, load_checkpoint, model_state, save_checkpoint
from transformer.commands.cli import export_main, translate_main
from transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transformer.decoding.search import beam_search, greedy_decode
from transformer.interop.export import hf_permutation
from transformer.model.attention import make_pad_mask
from transformer.model.embeddings import sinusoid_table

MAX_NEW = 30  # ours: max_len_a 0, max_len_b 30; HF: max_new_tokens 30; CT2: max_decoding_length 30
ALPHA = 1.0  # ours: length_penalty "fairseq" (len^alpha, EOS counted); HF: length_penalty; CT2: length_penalty
N_SENTENCES = 120


@pytest.fixture(scope="module", params=["post-ln-relu", "pre-ln-gelu"])
def trained(request, tmp_path_factory):
    """(checkpoint path, model, tokenizer, config, src (B, S), their texts) for each architecture."""
    folder = tmp_path_factory.mktemp(request.param)
    norm_first, activation = request.param == "pre-ln-gelu", request.param.split("-")[-1]
    path = build_trained(folder, norm_first=norm_first, activation=activation)
    model, tokenizer, config = build_model(load_checkpoint(path))
    texts = sentences(N_SENTENCES, seed=7)
    ids = tokenizer.encode_src(texts)
    src = torch.full((len(ids), max(map(len, ids))), PAD_ID, dtype=torch.long)  # (B, S)
    for b, row in enumerate(ids):
        src[b, : len(row)] = torch.tensor(row)
    return path, model, tokenizer, config, src, texts


def _ours(model, src, beam: int) -> list[list[int]]:
    mask = make_pad_mask(src, PAD_ID)
    lengths = dict(bos_id=BOS_ID, eos_id=EOS_ID, max_len_a=0.0, max_len_b=MAX_NEW, min_len=0)
    if beam == 1:
        return [h.tokens for h in greedy_decode(model, src, mask, **lengths)]
    hyps = beam_search(model, src, mask, beam_size=beam, alpha=ALPHA, length_penalty="fairseq", nbest=1, **lengths)
    return [h[0].tokens for h in hyps]


def test_hf_permutation_puts_sines_first_then_cosines():
    """Independent reference: HF's layout written out, sin(pos / 10000^(2i/D)) for i < D/2, then the cosines."""
    D, L = 8, 5
    table = sinusoid_table(L, D)[:, hf_permutation(D)]
    pos = torch.arange(L, dtype=torch.float64)[:, None]
    freq = torch.tensor([10000 ** (-2 * i / D) for i in range(D // 2)], dtype=torch.float64)
    expected = torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=1).float()
    assert hf_permutation(6).tolist() == [0, 2, 4, 1, 3, 5]
    torch.testing.assert_close(table, expected, atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------- Hugging Face


@pytest.fixture(scope="module")
def hf_export(trained, tmp_path_factory):
    pytest.importorskip("transformers")
    output = tmp_path_factory.mktemp("hf")
    assert export_main(["--checkpoint", str(trained[0]), "--format", "hf", "--output", str(output)]) == 0
    from transformers import AutoModelForSeq2SeqLM

    return output, AutoModelForSeq2SeqLM.from_pretrained(output).eval()


def test_hf_class_tokenizer_and_logits(trained, hf_export):
    _, model, tokenizer, config, src, texts = trained
    output, hf = hf_export
    from transformers import AutoTokenizer

    assert type(hf).__name__ == ("PegasusForConditionalGeneration" if config.model.norm_first else "MarianMTModel")
    assert (output / "model.safetensors").is_file()
    hf_tok = AutoTokenizer.from_pretrained(output)
    encoded = hf_tok(texts, padding=True, return_tensors="pt")
    assert torch.equal(encoded.input_ids, src)  # the same ids, EOS appended, padded with 0
    tgt_in = torch.cat([torch.full((len(src), 1), BOS_ID), src[:, :-1].clamp(min=4)], dim=1)  # (B, T)
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=src != PAD_ID, decoder_input_ids=tgt_in).logits
        ours = model(src, tgt_in)
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 4])
def test_hf_generate_is_token_identical(trained, hf_export, beam):
    _, model, _, _, src, _ = trained
    hf = hf_export[1]
    with torch.no_grad():
        out = hf.generate(
            input_ids=src,
            attention_mask=src != PAD_ID,
            num_beams=beam,
            do_sample=False,
            max_new_tokens=MAX_NEW,
            length_penalty=ALPHA,
            early_stopping=True,
        ).tolist()
    theirs = []
    for row in out:
        row = row[1:]  # decoder start (BOS)
        end = min([row.index(t) for t in (EOS_ID, PAD_ID) if t in row], default=len(row))
        theirs.append(row[:end])
    ours = _ours(model, src, beam)
    assert sum(len(t) for t in ours) > 3 * len(ours)  # real outputs, not empty ones
    assert theirs == ours


def test_hf_pipeline_translates(trained, hf_export):
    _, model, tokenizer, config, _, texts = trained
    from transformers import pipeline

    from transformer.decoding.streaming import StreamingEngine

    try:
        translator = pipeline("translation", model=str(hf_export[0]), device="cpu")
    except KeyError as exc:  # transformers 5 removed the task; generate (tested above) is what it ran
        pytest.skip(f"this transformers has no translation pipeline: {exc}")
    theirs = [r["translation_text"] for r in translator(texts[:6], num_beams=1, max_new_tokens=MAX_NEW)]
    decode = config.decode.__class__(beam_size=1, max_len_a=0.0, max_len_b=MAX_NEW)
    assert theirs == StreamingEngine(model, tokenizer, decode).translate_texts(texts[:6])


def test_hf_refuses_learned_positions(tmp_path, capsys):
    pytest.importorskip("transformers")
    path = build_trained(tmp_path, norm_first=False, activation="relu", steps=0)
    state = load_checkpoint(path)
    model, tokenizer, config = build_model(state)
    config = config.replace("model", positional="learned")
    from transformer.model.transformer import Transformer

    learned = Transformer.from_config(
        config.model, src_vocab_size=tokenizer.src_vocab_size, tgt_vocab_size=tokenizer.tgt_vocab_size, pad_id=PAD_ID
    )
    save_checkpoint(model_state(learned, config, tokenizer), tmp_path / "learned.pt")
    code = export_main(
        ["--checkpoint", str(tmp_path / "learned.pt"), "--format", "hf", "--output", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "learned positions" in err and "ctranslate2" in err


def test_missing_package_says_how_to_install(tmp_path, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("ctranslate2"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    path = build_trained(tmp_path, norm_first=False, activation="relu", steps=0)
    monkeypatch.setattr(builtins, "__import__", fake_import)
    code = export_main(["--checkpoint", str(path), "--format", "ctranslate2", "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "pip install" in err and "export" in err


# ------------------------------------------------------------------------------------------------ CTranslate2


@pytest.fixture(scope="module")
def ct2_export(trained, tmp_path_factory):
    pytest.importorskip("ctranslate2")
    output = tmp_path_factory.mktemp("ct2")
    assert export_main(["--checkpoint", str(trained[0]), "--format", "ctranslate2", "--output", str(output)]) == 0
    return output


@pytest.fixture(scope="module")
def ct2_translator(ct2_export):
    import ctranslate2

    return ctranslate2.Translator(str(ct2_export), device="cpu", compute_type="float32", intra_threads=1)


def _pieces(tokenizer, rows: list[list[int]]) -> list[list[str]]:
    return [[tokenizer.tgt_piece(i) for i in row if i != PAD_ID] for row in rows]


def test_ct2_log_probs_agree(trained, ct2_translator):
    _, model, tokenizer, _, src, _ = trained
    targets = _ours(model, src, 1)
    results = ct2_translator.score_batch(_pieces(tokenizer, src.tolist()), _pieces(tokenizer, targets))
    tgt = [t + [EOS_ID] for t in targets]
    T = max(map(len, tgt))
    tgt_out = torch.tensor([t + [PAD_ID] * (T - len(t)) for t in tgt])  # (B, T)
    tgt_in = torch.cat([torch.full((len(tgt), 1), BOS_ID), tgt_out[:, :-1]], dim=1)  # (B, T)
    with torch.no_grad():
        log_probs = model(src, tgt_in).log_softmax(-1).gather(2, tgt_out[:, :, None]).squeeze(2)  # (B, T)
    for b, result in enumerate(results):
        ours = log_probs[b, : len(tgt[b])]
        torch.testing.assert_close(torch.tensor(result.log_probs), ours, atol=1e-4, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("beam", [1, 4])
def test_ct2_is_token_identical(trained, ct2_translator, beam):
    _, model, tokenizer, _, src, _ = trained
    results = ct2_translator.translate_batch(
        _pieces(tokenizer, src.tolist()),
        beam_size=beam,
        length_penalty=ALPHA,
        max_decoding_length=MAX_NEW,
        return_scores=True,
    )  # no suppress_sequences: CT2 would renormalise over the rest of the vocabulary, we do not
    theirs = [r.hypotheses[0] for r in results]
    assert theirs == _pieces(tokenizer, _ours(model, src, beam))
    assert all(math.isfinite(r.scores[0]) for r in results)


def test_cli_rejects_unknown_format(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        export_main(["--checkpoint", "x.pt", "--format", "onnx", "--output", str(tmp_path)])
    assert exc.value.code == 2


def test_export_never_replaces_foreign_files(tmp_path, capsys):
    path = build_trained(tmp_path, norm_first=False, activation="relu", steps=0)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    code = export_main(["--checkpoint", str(path), "--format", "ctranslate2", "--output", str(tmp_path / "out")])
    assert code == 2 and "notes.txt" in capsys.readouterr().err
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_export_needs_existing_checkpoint(tmp_path, capsys):
    code = export_main(["--checkpoint", str(tmp_path / "nope.pt"), "--format", "hf", "--output", str(tmp_path / "o")])
    assert code == 2 and "checkpoint not found" in capsys.readouterr().err


# ------------------------------------------------------------------------ the checkpoint's own decoding settings

# Reversed, each of these holds a run the checkpoint's limit cuts (decode.max_ngram_repeats 2: "the the the").
RUNS = ["cat the the the", "dog dog dog ran home", "the cat the cat the cat", "red red red red", "a small small small"]


def _translate(path, texts: list[str], folder, *overrides: tuple[str, object]) -> list[str]:
    """What transformer-translate writes for `texts` at the checkpoint's settings, `--set decode.KEY=VALUE` each."""
    source, out = folder / "in.txt", folder / "out.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    sets = [arg for key, value in overrides for arg in ("--set", f"decode.{key}={value}")]
    argv = ["--checkpoint", str(path), "--input", str(source), "--output", str(out), "--quiet", *sets]
    assert translate_main(argv) == 0
    return out.read_text(encoding="utf-8").splitlines()


def _shipped(folder):
    """The export's repeat_runs.py, loaded from the folder as a user of the export loads it."""
    spec = importlib.util.spec_from_file_location("shipped_repeat_runs", folder / "repeat_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_exports_record_and_name_the_settings_they_leave_out(trained, hf_export, ct2_export, caplog):
    """The tiny checkpoint decodes with beam 4, len^1, at most 30 pieces, the run limit 2 (the default) and capitals
    folded (the default): generate leaves out only the folding, CTranslate2 the run limit too; the shipped processor
    file imports nothing but torch."""
    hf, ct2 = (json.loads((f / "decoding.json").read_text()) for f in (hf_export[0], ct2_export))
    assert list(hf["not_applied"]) == ["fold_capitals"] and hf["processors"] == {"max_ngram_repeats": 2}
    assert list(ct2["not_applied"]) == ["fold_capitals", "max_ngram_repeats"] and ct2["processors"] == {}
    assert hf["checkpoint"]["max_ngram_repeats"] == ct2["checkpoint"]["max_ngram_repeats"] == 2
    assert not (ct2_export / "repeat_runs.py").exists()
    tree = ast.parse((hf_export[0] / "repeat_runs.py").read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported == {"__future__", "torch"}
    caplog.set_level(logging.WARNING)
    assert export_main(["--checkpoint", str(trained[0]), "--format", "ctranslate2", "--output", str(ct2_export)]) == 0
    [note] = [r.getMessage() for r in caplog.records if "will not apply" in r.getMessage()]
    assert "max_ngram_repeats=2" in note and "fold_capitals=True" in note and "decoding.json" in note


@pytest.mark.slow
def test_hf_export_translates_as_translate_does_at_the_checkpoints_settings(trained, hf_export, tmp_path):
    """generate with nothing at the call but the shipped processor writes what transformer-translate writes at the
    checkpoint's own settings, also on the lines whose output the run limit changes."""
    from transformers import AutoTokenizer, LogitsProcessorList

    path, texts = trained[0], trained[5][:40] + RUNS
    folder, hf = hf_export
    settings = json.loads((folder / "decoding.json").read_text())
    ours = _translate(path, texts, tmp_path, *settings["matched"].items())
    assert ours == _translate(path, texts, tmp_path)  # folding capitals changes none of these lines
    unlimited = _translate(path, texts, tmp_path, ("max_ngram_repeats", 0))
    assert sum(a != b for a, b in zip(ours, unlimited)) >= 3
    processor = _shipped(folder).RepeatRunLogitsProcessor(settings["processors"]["max_ngram_repeats"])
    tok = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        out = hf.generate(
            **tok(texts, return_tensors="pt", padding=True), logits_processor=LogitsProcessorList([processor])
        )
    assert tok.batch_decode(out, skip_special_tokens=True) == ours


@pytest.mark.slow
def test_ct2_export_translates_as_translate_does_but_for_what_it_names(trained, ct2_export, ct2_translator, tmp_path):
    """translate_batch with decoding.json's arguments writes what transformer-translate writes with the settings the
    export names set as the engine applies them (no run limit), and differs from the checkpoint's where it warned."""
    import sentencepiece as spm

    path, texts = trained[0], trained[5][:40] + RUNS
    settings = json.loads((ct2_export / "decoding.json").read_text())
    ours = _translate(path, texts, tmp_path, *settings["matched"].items())
    source = spm.SentencePieceProcessor(model_file=str(ct2_export / "source.spm"))
    target = spm.SentencePieceProcessor(model_file=str(ct2_export / "target.spm"))
    batch = [source.encode(text, out_type=str) + ["</s>"] for text in texts]
    results = ct2_translator.translate_batch(batch, **settings["arguments"])
    assert [target.decode(r.hypotheses[0]) for r in results] == ours
    assert sum(a != b for a, b in zip(ours, _translate(path, texts, tmp_path))) >= 3
