"""transformer-distill (commands/distill.py, training/distillation.py) with a tiny untrained teacher: every stage in
one command and each on its own, the original pairs beside the distilled ones, an ensemble teacher scoring with its
members' mean probability (test_ensemble.py's oracle), two processes giving the corpus of one, and a process killed
mid-translation resumed to the same bytes. Bad inputs are cases of tests/bad_inputs_training.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tiny_checkpoint
import torch
import yaml
from test_ensemble import _ensemble_log_prob

from transformer.checkpoint import load_checkpoint
from transformer.commands.cli import distill_main
from transformer.decoding import streaming as engine
from transformer.decoding.ensemble import load_models

ROOT = Path(__file__).resolve().parents[1]
STUDENT = """model: {d_model: 16, n_heads: 2, d_ff: 24, n_encoder_layers: 1, n_decoder_layers: 1, max_positions: 24}
data:
  src_lang: xx
  tgt_lang: yy
  train: {tsv: train.tsv}
  vocab_size: 40
  spm_input_sentences: 0
  max_tokens_per_sentence: 24
  cache_dir: CACHE
train: {max_steps: 6, save_every: 2, keep_last: 3, valid_every: 0, max_tokens: 256, update_tokens: 256, warmup_steps: 2}
"""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """A tiny teacher (xx -> yy, beam 2, at most 6 output pieces), a sibling for ensembles, a 40-pair corpus and a
    student config that trains on it for 6 updates."""
    root = tmp_path_factory.mktemp("distill")
    teacher = tiny_checkpoint.build(root)["checkpoint"]
    (root / "sibling").mkdir()
    sibling = tiny_checkpoint.build_sibling(teacher, root / "sibling", seed=7)
    src, tgt = tiny_checkpoint.sentences(40, seed=3), tiny_checkpoint.sentences(40, seed=4)
    (root / "train.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in zip(src, tgt)), encoding="utf-8")
    (root / "student.yaml").write_text(STUDENT.replace("CACHE", str(root / "cache")), encoding="utf-8")
    return {"teacher": teacher, "sibling": sibling, "config": root / "student.yaml", "root": root}


def _args(inputs, out: Path, *extra: str, teachers: tuple[str, ...] = ("teacher",)) -> list[str]:
    return [
        *("--teacher", *(str(inputs[t]) for t in teachers)),
        *("--config", str(inputs["config"]), "--out", str(out), "--no-progress", "--threads", "1", *extra),
    ]


def _translate(inputs, out: Path, *extra: str, teachers: tuple[str, ...] = ("teacher",)) -> bytes:
    assert distill_main(_args(inputs, out, "--stage", "translate", *extra, teachers=teachers)) == 0
    return (out / "teacher.tsv").read_bytes()


def test_every_stage_in_one_command_then_one_stage_on_its_own(inputs, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("transformer.training.trainer.plot_run", lambda out_dir: None)  # no curves: seconds
    out = tmp_path / "out"
    assert distill_main(_args(inputs, out, "--chunk-lines", "16", "--average-last", "3")) == 0
    said = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in said] == ["translate", "filter", "train", "average"]
    assert said[0] == f"translate: 3 chunks, 40 pairs in {out / 'teacher.tsv'}"
    rows = (out / "teacher.tsv").read_text(encoding="utf-8").splitlines()
    sources = [line.split("\t")[0] for line in (inputs["root"] / "train.tsv").read_text().splitlines()]
    assert [r.split("\t")[0] for r in rows] == sources and sorted(os.listdir(out / "chunks"))[-1] == "manifest.json"
    report = json.loads((out / "filters.json").read_text())
    assert report["pairs"] == 40 and report["kept"] == 40 - sum(report["dropped"].values())
    assert len((out / "distilled.tsv").read_text(encoding="utf-8").splitlines()) == report["kept"]
    student = yaml.safe_load((out / "student.yaml").read_text())
    assert student["data"]["train"]["tsv"] == str(out / "distilled.tsv") and student["data"]["train"]["tsv_columns"]
    assert student["train"]["out_dir"] == str(out / "student")
    averaged, last = load_checkpoint(out / "student/averaged.pt"), load_checkpoint(out / "student/checkpoint_6.pt")
    assert averaged["averaged_from"] == [str(out / f"student/checkpoint_{s}.pt") for s in (2, 4, 6)]
    mean = sum(load_checkpoint(p)["model"]["encoder.layers.0.ff.linear1.weight"] for p in averaged["averaged_from"]) / 3
    torch.testing.assert_close(averaged["model"]["encoder.layers.0.ff.linear1.weight"], mean)
    assert last["step"] == 6
    before = {name: (out / name).stat().st_mtime_ns for name in ("teacher.tsv", "distilled.tsv")}
    assert distill_main(_args(inputs, out, "--chunk-lines", "16", "--average-last", "3")) == 0  # all done already
    assert "train: stopped at update 6 (already trained)" in capsys.readouterr().out
    assert before == {name: (out / name).stat().st_mtime_ns for name in before}  # not rewritten: the cache holds
    assert distill_main(_args(inputs, out, "--stage", "filter", "--min-score", "0")) == 0  # every score is < 0
    assert json.loads((out / "filters.json").read_text())["kept"] == 0


def test_a_student_stopped_by_a_signal_stops_the_stages_after_it(inputs, tmp_path, monkeypatch, capsys):
    """SIGTERM during training: the trainer saves and returns; the command exits 143 and averages nothing."""

    class Stopped:
        def __init__(self, config, resume, progress):
            self.out = Path(config.train.out_dir)

        def run(self):
            return {"step": 3, "reason": "SIGTERM"}

    monkeypatch.setattr("transformer.training.trainer.Trainer", Stopped)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "distilled.tsv").write_text("a b\tc d\te f\t-0.5000\n", encoding="utf-8")
    assert distill_main(_args(inputs, tmp_path / "out", "--stage", "train")) == 143
    assert "interrupted (SIGTERM)" in capsys.readouterr().err and not (tmp_path / "out/student/averaged.pt").exists()


def test_the_student_can_train_beside_the_original_pairs(inputs, tmp_path):
    from transformer.config import DistillConfig, load_config
    from transformer.training.distillation import DistillPaths, student_config

    config = load_config(inputs["config"])
    mixed = student_config(config, DistillConfig(original_weight=0.5), DistillPaths(tmp_path))
    distilled, original = mixed.data.train.corpora
    assert (distilled.tsv, distilled.tsv_columns) == (str(tmp_path / "distilled.tsv"), (0, 1))
    assert original.tsv == config.data.train.tsv and original.weight == 0.5
    assert student_config(config, DistillConfig(), DistillPaths(tmp_path)).data.train.corpora is None


def test_an_ensemble_teacher_scores_with_its_members_mean_probability(inputs, tmp_path, monkeypatch):
    found = []
    real = engine.StreamingEngine.translate

    def recording(self, lines, **kwargs):
        for results in real(self, lines, **kwargs):
            found.append(results[0])
            yield results

    monkeypatch.setattr(engine.StreamingEngine, "translate", recording)
    both = _translate(inputs, tmp_path / "both", teachers=("teacher", "sibling")).decode().splitlines()
    models, tokenizer, _ = load_models([inputs["teacher"], inputs["sibling"]])
    for line, hypothesis in zip(both, found):
        source, _, _, score = line.split("\t")
        src = torch.tensor(tokenizer.encode_src([source]))
        finished = len(hypothesis.tokens) < 6  # the teacher's max_len_b: at the limit a hypothesis has no EOS
        expected = _ensemble_log_prob(list(models.models), src, hypothesis.tokens, finished)
        assert hypothesis.log_prob == pytest.approx(expected, abs=1e-4)
        assert float(score) == pytest.approx(expected / (len(hypothesis.tokens) + 1), abs=6e-5)
    assert len(found) == 40
    one = _translate(inputs, tmp_path / "one")
    assert _translate(inputs, tmp_path / "copies", teachers=("teacher", "teacher")) == one  # copies: the model
    assert one.decode() != "\n".join(both) + "\n"  # the sibling counts


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(inputs, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "transformer", "distill", *_args(inputs, out, "--stage", "translate", *extra)]


@pytest.mark.slow  # two processes start (torch's import): 8 s on an idle 2-core machine, over 20 s on a busy one
def test_two_processes_give_the_corpus_of_one(inputs, tmp_path):
    """Two processes as torchrun starts them (RANK, WORLD_SIZE, MASTER_ADDR/PORT; gloo on the CPU)."""
    one = _translate(inputs, tmp_path / "one", "--chunk-lines", "6")
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    env |= {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    ranks = [
        subprocess.Popen(
            _command(inputs, tmp_path / "two", "--chunk-lines", "6"),
            env=env | {"RANK": str(r), "LOCAL_RANK": str(r)},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outputs = [rank.communicate(timeout=120) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    assert outputs[0][0].startswith("translate: 7 chunks (4 translated by this process), 40 pairs")
    assert outputs[1][0] == ""  # rank 0 reports
    assert (tmp_path / "two/teacher.tsv").read_bytes() == one


@pytest.mark.slow  # a process starts (torch's import) and 60 chunks are translated one by one, twice
def test_a_process_killed_mid_translation_resumes_to_the_same_corpus(inputs, tmp_path):
    """SIGKILL once a few chunks exist; the rerun gives the bytes of an uninterrupted run with the same chunks (a
    line's scores may differ in the last digit when it is batched with other lines: the chunks fix the batches)."""
    big = tmp_path / "big.yaml"  # 60 pairs, one chunk a line: the kill lands mid-run
    src = tiny_checkpoint.sentences(60, seed=11)
    (tmp_path / "big.tsv").write_text("".join(f"{s}\t{s}\n" for s in src), encoding="utf-8")
    big.write_text(inputs["config"].read_text().replace("train.tsv", str(tmp_path / "big.tsv")), encoding="utf-8")
    inputs = inputs | {"config": big}
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    out = tmp_path / "killed"
    process = subprocess.Popen(_command(inputs, out, "--chunk-lines", "1"), env=env, cwd=ROOT)
    deadline = time.monotonic() + 60
    while not (out / "chunks" / "00003.tsv").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    written = len(list((out / "chunks").glob("0*.tsv")))
    assert 3 < written < 60 and not (out / "teacher.tsv").exists(), written  # killed mid-run
    resumed = _translate(inputs, out, "--chunk-lines", "1")
    assert not list((out / "chunks").glob(".*.tmp"))  # a temporary file the kill left is gone
    assert resumed == _translate(inputs, tmp_path / "whole", "--chunk-lines", "1")
