"""decode_benchmark.py: the decode benchmark's inputs, and its matched settings, checked by CTranslate2 decoding a
random model's exported weights exactly as our search does (greedy and beam), lengths forced as for random weights."""

from __future__ import annotations

import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

from transformer.benchmarks import decode as db
from transformer.data.tokenizer import EOS_ID, SPECIAL_PIECES

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")


def _random_inputs():
    return db.decode_inputs(None, config_path=TINY, vocab=50, sentences=6, src_len=8)


def test_random_inputs_are_reproducible_and_end_with_eos():
    model, pieces, _, sources, references = _random_inputs()
    assert sources == _random_inputs()[3] and references is None and not model.training
    for row in sources:
        assert 4 <= len(row) < 12 and row[-1] == EOS_ID and all(4 <= i < 50 for i in row[:-1])
    assert [pieces.tgt_piece(i) for i in range(6)] == [*SPECIAL_PIECES, "t4", "t5"]


def test_compare_engines_counts_sentences_decoded_as_ours():
    timing = {"tokens_per_s": 10.0, "seconds": 1.0, "tokens": 10}
    result = {"ours": {**timing, "outputs": [[5], [6, 7]]}, "other": {**timing, "outputs": [[5], [6]]}}
    engines = db.compare_engines(result, tokenizer=None, references=None)
    assert engines == {"ours": {**timing, "same_as_ours": 1.0}, "other": {**timing, "same_as_ours": 0.5}}


def test_ctranslate2_decodes_as_ours(tmp_path):
    pytest.importorskip("ctranslate2")
    model, pieces, config, sources, _ = _random_inputs()
    factories = db.decode_engines(
        model, pieces, config, ["ours", "ctranslate2"], ["fp32"], threads=1, random_weights=True, tmp=tmp_path
    )["fp32"]
    batches = db.batches_of(sources, 4)
    with db.EngineProcesses(factories) as engines:  # each engine in a process of its own, as the benchmark runs them
        for beam in (1, 2):
            settings = db.DecodeSettings(beam=beam, alpha=1.0, max_len_a=1.2, max_len_b=10, forced=5)
            result = db.time_engines(engines, sources, batches, settings, repeats=1)
            assert result["ours"]["outputs"] == result["ctranslate2"]["outputs"], beam
            assert all(len(hyp) == 5 for hyp in result["ours"]["outputs"])
            assert result["ours"]["tokens"] == 5 * len(sources) and result["ours"]["seconds"] > 0


def test_ours_decodes_in_bf16_on_a_cast_copy():
    """The GPU compute types cast a copy of our model (here bf16 on the CPU): forced lengths hold, greedy and beam,
    and the model given stays float32."""
    model, _, _, sources, _ = _random_inputs()
    run = db.build_engine("ours", "bf16", 1, model)
    for beam in (1, 4):
        settings = db.DecodeSettings(beam=beam, alpha=1.0, max_len_a=1.2, max_len_b=10, forced=5)
        outputs = run(sources[:3], settings)
        assert len(outputs) == 3 and all(len(hyp) == 5 for hyp in outputs), beam
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_the_script_reports_bad_input_in_one_line(tmp_path):
    """scripts/benchmark.py, both modes: a missing file is one line on stderr and exit code 2, no traceback."""
    script = str(ROOT / "scripts" / "benchmark.py")
    missing = tmp_path / "none.pt"
    for args, message in (
        (["decode", "--checkpoint", str(missing)], f"error: checkpoint not found: {missing}"),
        (["--config", str(tmp_path / "none.yaml")], "error: "),
        (["decode", "--computes", "fp16"], "error: --computes fp16 is not offered on --device cpu: use fp32, int8"),
        *(
            []
            if torch.cuda.is_available()
            else [(["decode", "--device", "cuda"], "error: --device cuda: this machine")]
        ),
    ):
        proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(message), proc.stderr


def test_a_peer_that_fails_is_left_out_and_ours_still_measured(tmp_path, monkeypatch):
    """A peer whose export raises (HF under another major version, say) is left out before any process starts; one
    whose process cannot build it (here: CTranslate2 given a folder with no model) is left out at the warm-up; both
    with their reasons, and ours is measured."""

    def broken(*args):
        raise AttributeError("'MarianConfig' object has no attribute 'something'")

    monkeypatch.setattr(db, "_export_hf", broken)
    model, pieces, config, sources, _ = _random_inputs()
    left_out = {}
    factories = db.decode_engines(
        model, pieces, config, ["ours", "hf"], ["fp32"], threads=1, random_weights=True, tmp=tmp_path, left_out=left_out
    )["fp32"]
    assert list(factories) == ["ours"] and "its export raised AttributeError" in left_out["hf"]
    factories["ctranslate2"] = partial(db.build_engine, "ctranslate2", "fp32", 1, tmp_path / "missing")
    settings = db.DecodeSettings(beam=1, alpha=1.0, max_len_a=1.2, max_len_b=10, forced=5)
    with db.EngineProcesses(factories) as engines:
        result = db.time_engines(engines, sources, db.batches_of(sources, 4), settings, repeats=1)
    assert list(result) == ["ours"] and result["ours"]["tokens"] == 5 * len(sources)
    assert list(engines.left_out) == ["ctranslate2"] and engines.left_out["ctranslate2"]
