"""The recipe runner on the tiny config: pieces join exactly, the average is scored, the results file is complete."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import sacrebleu
import torch

from transformer.checkpoint import load_checkpoint
from transformer.config import load_config
from transformer.errors import UserError
from transformer.training.recipe import checkpoints_to_average, piece_limits, recipe_ended
from transformer.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs/tiny.yaml"


def _load_script():
    spec = importlib.util.spec_from_file_location("run_recipe", ROOT / "scripts/run_recipe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _overrides(tmp_path: Path, out: str) -> list[str]:
    return [
        f"train.out_dir={tmp_path / out}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "train.max_steps=40",
        "train.valid_every=10",
        "train.save_every=10",
        "train.keep_last=3",
        "train.log_every=1",
        "model.dropout=0.1",
    ]


@pytest.mark.parametrize(
    ("max_steps", "max_time", "step", "elapsed", "piece", "updates", "expected"),
    [
        (100, None, 0, 0.0, 540.0, 0, (100, 540.0)),  # the piece's time, the recipe's steps
        (100, None, 90, 600.0, 540.0, 30, (100, 1140.0)),  # cumulative: the recipe's 100 come before 90 + 30
        (0, "15m", 10, 600.0, 540.0, 15, (25, 900.0)),  # the recipe's 15 minutes end before the piece's
        (0, None, 0, 0.0, 0.0, 0, (0, float("inf"))),  # no limits at all
    ],
)
def test_piece_limits(max_steps, max_time, step, elapsed, piece, updates, expected):
    config = load_config(TINY, [f"train.max_steps={max_steps}", f"train.max_time={max_time or 'null'}"])
    assert piece_limits(config, step=step, elapsed=elapsed, piece_seconds=piece, piece_updates=updates) == expected


@pytest.mark.parametrize(
    ("reason", "step", "elapsed", "ended"),
    [
        ("patience", 7, 1.0, True),
        ("max_epochs", 7, 1.0, True),
        ("max_steps", 40, 1.0, True),
        ("max_steps", 15, 1.0, False),
        ("max_time", 15, 59.0, False),
        ("max_time", 15, 60.0, True),
        ("SIGTERM", 15, 1.0, False),
    ],
)
def test_recipe_ended(reason, step, elapsed, ended):
    config = load_config(TINY, ["train.max_steps=40", "train.max_time=1m"])
    assert recipe_ended(config, {"reason": reason, "step": step, "elapsed": elapsed}) is ended


def test_checkpoints_to_average_keeps_to_the_save_schedule(tmp_path):
    for step in (20, 30, 37, 40, 43):  # 37: a piece's end; 43: the last one, where the recipe stopped
        (tmp_path / f"checkpoint_{step}.pt").touch()
    names = lambda paths: [p.name for p in paths]
    assert names(checkpoints_to_average(tmp_path, save_every=10, last=3)) == [
        "checkpoint_30.pt",
        "checkpoint_40.pt",
        "checkpoint_43.pt",
    ]
    assert names(checkpoints_to_average(tmp_path, save_every=0, last=2)) == ["checkpoint_40.pt", "checkpoint_43.pt"]


def _run_in_pieces(tmp_path: Path) -> None:
    """scripts/run_recipe.py in pieces of 15 updates, one per call, into tmp_path/pieces: no results until the last
    piece (15, 30, 40), which scores the average of the last 2 checkpoints into tmp_path/results."""
    main = _load_script()
    args = [
        "--config",
        str(TINY),
        "--piece-updates",
        "15",
        "--piece",
        "0",
        "--max-pieces",
        "1",
        "--average",
        "2",
        "--results-dir",
        str(tmp_path / "results"),
        "--no-progress",
    ]
    args += [a for s in _overrides(tmp_path, "pieces") for a in ("--set", s)]
    for _ in range(2):
        assert main(args) == 0
        assert not (tmp_path / "results").exists()  # training not over yet: no results
    assert main(args) == 0  # the last piece, then the scores
    state = json.loads((tmp_path / "pieces/recipe.json").read_text())
    assert [p["step"] for p in state["pieces"]] == [15, 30, 40] and state["done"]


def _check_the_results_file(tmp_path: Path) -> None:
    """The results file holds the average's test scores, which the sacrebleu package reproduces from the
    hypotheses file."""
    record = json.loads((tmp_path / "results/tiny.json").read_text())
    for key in (
        "kind",
        "device",
        "date",
        "config",
        "command",
        "updates",
        "train_minutes",
        "test_bleu",
        "test_chrf",
        "bleu_signature",
    ):
        assert key in record, key
    assert record["kind"] == "bleu" and record["updates"] == 40 and record["pieces"] == 3
    assert record["averaged"] == ["checkpoint_30.pt", "checkpoint_40.pt"] and record["test_sentences"] == 40
    assert record["command"].startswith("python scripts/run_recipe.py --config") and "CPU" in record["device"]
    assert record["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    config = load_config(TINY)
    references = [line.split("\t")[2] for line in _test_lines(config.data.test.tsv)][:40]
    hypotheses = (tmp_path / "pieces/averaged.test.hyp").read_text(encoding="utf-8").splitlines()
    assert record["test_bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)


@pytest.mark.slow
def test_recipe_in_pieces_equals_one_run_and_writes_its_results(tmp_path):
    """Pieces of 15 updates (15, 30, 40), one per call, equal one uninterrupted 40-update run bitwise; the results
    file holds the average's test scores, which the sacrebleu package reproduces from the hypotheses file."""
    _run_in_pieces(tmp_path)
    Trainer(load_config(TINY, _overrides(tmp_path, "whole")), progress=False).run()
    pieced = load_checkpoint(tmp_path / "pieces/checkpoint_last.pt")["model"]
    whole = load_checkpoint(tmp_path / "whole/checkpoint_last.pt")["model"]
    assert all(torch.equal(pieced[k], whole[k]) for k in whole)
    # the same losses at every update and the same validations: none added where a piece ended
    metrics = lambda run: [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
    same = lambda m: (m["step"], m.get("loss"), m.get("valid_loss"), m.get("valid_bleu"))
    assert [same(m) for m in metrics("pieces")] == [same(m) for m in metrics("whole")]
    assert [m["step"] for m in metrics("pieces") if "valid_loss" in m] == [10, 20, 30, 40]
    assert sorted(p.name for p in (tmp_path / "pieces").glob("checkpoint_[0-9]*.pt")) == [
        "checkpoint_20.pt",
        "checkpoint_30.pt",
        "checkpoint_40.pt",
    ]  # the piece that ended at 15 left no numbered checkpoint
    _check_the_results_file(tmp_path)


def _test_lines(path: str) -> list[str]:
    import lzma

    with lzma.open(ROOT / path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def test_refuses_a_run_directory_trained_with_other_settings(tmp_path):
    from transformer.training.recipe import _read_state, _write_state

    config = load_config(TINY, [f"train.out_dir={tmp_path}"])
    _write_state(tmp_path, _read_state(tmp_path, config))
    with pytest.raises(UserError, match=r"model.d_model differ"):
        _read_state(tmp_path, config.replace("model", d_model=48))
    (tmp_path / "recipe.json").unlink()
    (tmp_path / "checkpoint_last.pt").touch()
    with pytest.raises(UserError, match="run_recipe did not start"):
        _read_state(tmp_path, config)


def test_the_paper_recipe_is_the_papers_model_and_schedule():
    """configs/bible_es_en_paper.yaml against the paper: post-LN, sinusoidal, shared and tied embeddings (3.1, 3.4,
    3.5), base dimensions (Table 3), Adam (0.9, 0.98, 1e-9), noam with 4,000 warmup updates, label smoothing 0.1."""
    config = load_config(ROOT / "configs/bible_es_en_paper.yaml")
    model, train = config.model, config.train
    assert (model.d_model, model.n_heads, model.d_ff, model.n_encoder_layers, model.n_decoder_layers) == (
        512,
        8,
        2048,
        6,
        6,
    )
    assert not model.norm_first and model.positional == "sinusoidal" and model.share_embeddings and model.tie_output
    assert model.activation == "relu" and model.attention_dropout == model.activation_dropout == 0.0
    assert train.lr_schedule == "noam" and train.warmup_steps == 4000 and train.label_smoothing == 0.1
    assert train.adam_betas == (0.9, 0.98) and train.adam_eps == 1e-9
    assert train.patience > 0 and train.keep_last > 5 and config.decode.beam_size == 4


@pytest.mark.parametrize(
    ("train_precision", "decode_precision", "dtype"),
    [("bf16", "fp32", torch.float32), ("fp32", "bf16", torch.bfloat16), ("bf16", "auto", torch.float32)],
)
def test_scoring_decodes_at_the_decode_precision(tmp_path, monkeypatch, train_precision, decode_precision, dtype):
    """The averaged model translates the test split under decode.precision, resolved by precision.py's rule as
    transformer-evaluate resolves it (auto is fp32 on the CPU), whatever train.precision says: the output layer's
    dtype shows which autocast ran."""
    import tiny_checkpoint

    from transformer import checkpoint
    from transformer.training.recipe import score_average

    paths = tiny_checkpoint.build(tmp_path)
    _, _, config = checkpoint.load_for_inference(paths["checkpoint"])
    config = config.replace("train", precision=train_precision).replace("decode", precision=decode_precision)
    from transformer.decoding import streaming

    seen, build_model, pack_linears = [], checkpoint.build_model, streaming.pack_linears
    watch = lambda model: model.output_proj.register_forward_hook(lambda m, i, output: seen.append(output.dtype))  # noqa: E731

    def watched(*args, **kwargs):
        model, tokenizer, stored = build_model(*args, **kwargs)
        watch(model)
        return model, tokenizer, stored

    def packed(model):  # fp32 on the CPU decodes with a copy whose Linear layers are packed (cpu_linear.py)
        model = pack_linears(model)
        watch(model)
        return model

    monkeypatch.setattr(checkpoint, "build_model", watched)
    monkeypatch.setattr(streaming, "pack_linears", packed)
    monkeypatch.setattr("transformer.devices.pick_device", lambda name=None: torch.device("cpu"))
    scores, sentences = score_average(config, tmp_path, [paths["checkpoint"]])
    assert set(seen) == {dtype} and sentences == 12 and 0 <= scores["bleu"] <= 100
    assert len((tmp_path / "averaged.test.hyp").read_text(encoding="utf-8").splitlines()) == 12


def test_a_decode_precision_this_machine_cannot_run_is_refused_before_training(tmp_path, monkeypatch):
    from transformer.training.recipe import run_recipe

    monkeypatch.setattr("transformer.devices.pick_device", lambda name=None: torch.device("cpu"))
    with pytest.raises(UserError, match="decode.precision fp16 needs a CUDA device"):
        run_recipe(str(TINY), [*_overrides(tmp_path, "run"), "decode.precision=fp16"], results_dir=tmp_path / "res")
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()  # nothing trained or prepared
