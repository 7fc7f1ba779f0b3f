"""The distillation measurement (benchmarks/distill.py, scripts/benchmark_distill.py): its goals computed from
hand-made figures, and the whole run on the tiny config for a few updates (teacher, distilled corpus, four students,
scores, int8 speed, the record), then a rerun that trains nothing again."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from transformer.benchmarks.distill import goals

ROOT = Path(__file__).resolve().parents[1]


def test_the_goals_follow_from_the_figures():
    result = {
        "teacher": {"bleu": 20.0, "chrf": 45.0, "sentences_per_s": 10.0},
        "original": [{"bleu": 15.0}, {"bleu": 16.0}],  # mean 15.5
        "distilled": [{"bleu": 16.4}, {"bleu": 16.8}],  # mean 16.6: +1.1
        "distilled_int8": [{"chrf": 43.0, "sentences_per_s": 29.0}, {"chrf": 44.4, "sentences_per_s": 33.0}],
    }
    assert goals(result) == {
        "bleu_gain": 1.1,
        "bleu_gain_met": True,
        "int8_chrf_gap": 1.3,  # 45 - 43.7
        "int8_chrf_gap_met": True,
        "int8_speedup": 3.1,  # 31 / 10
        "int8_speedup_met": True,
    }
    result["distilled"][0]["bleu"] = 16.0  # mean 16.4: +0.9
    result["distilled_int8"][1]["sentences_per_s"] = 30.0  # 29.5 / 10
    result["teacher"]["chrf"] = 45.3  # gap 1.6
    met = {k: v for k, v in goals(result).items() if k.endswith("_met")}
    assert met == {"bleu_gain_met": False, "int8_chrf_gap_met": False, "int8_speedup_met": False}


def _script():
    spec = importlib.util.spec_from_file_location("benchmark_distill", ROOT / "scripts" / "benchmark_distill.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # five tiny trainings and their translations
def test_the_measurement_runs_end_to_end_on_the_tiny_config_and_a_rerun_trains_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("transformer.training.trainer.plot_run", lambda out_dir: None)  # no curves: seconds each
    data = ROOT / "data" / "bible-es-en"
    common = ["data.cache_dir=cache", "data.valid=null", "train.save_every=2"]  # no validation
    student = [
        *common,
        "train.max_steps=4",
        f"data.train={{tsv: {data}/dev.tsv.xz, tsv_columns: [1, 2], max_examples: 60}}",
    ]
    argv = ["--work", "work", "--teacher-config", str(ROOT / "configs/tiny.yaml"), "--teacher-time", "1h"]
    argv += [a for s in [*common, "train.max_steps=6"] for a in ("--teacher-set", s)]
    argv += ["--student-config", str(ROOT / "configs/tiny.yaml"), *(a for s in student for a in ("--student-set", s))]
    argv += ["--min-length-ratio", "0", "--max-length-ratio", "0"]  # a teacher of 6 updates: its outputs are poor
    argv += ["--test-lines", "8", "--rounds", "1", "--average-last", "2", "--threads", "1", "--json", "r/d.json"]
    assert _script().main(argv) == 0
    record = json.loads((tmp_path / "r/d.json").read_text())
    assert record["kind"] == "distill" and record["test_sentences"] == 8 and record["teacher_steps"] == [6]
    assert record["distilled_corpus"]["pairs"] == 60 and record["command"].endswith("r/d.json")
    assert [r["steps"] for r in record["original"] + record["distilled"]] == [4, 4, 4, 4]
    assert [r["seed"] for r in record["distilled_int8"]] == [1, 2] and record["teacher"]["sentences_per_s"] > 0
    assert record["goals"] == goals(record) and "load_average" in record
    trained = sorted((tmp_path / "work").glob("*/averaged.pt"))
    assert [p.parent.name for p in trained] == [
        *("student-distilled-s1", "student-distilled-s2", "student-original-s1", "student-original-s2", "teacher-s1")
    ]
    before = [p.stat().st_mtime_ns for p in trained]
    assert _script().main(argv) == 0
    assert [p.stat().st_mtime_ns for p in trained] == before  # done runs are not trained again
    assert json.loads((tmp_path / "r/d.json").read_text())["original"] == record["original"]


def test_the_large_student_config_is_the_measured_one():
    """configs/student_large.yaml is configs/student.yaml with the --student-set overrides of the record that met the
    goals (docs/results/distill/demo1h_x2_student192_12600updates_2026-11-28.json), its own out_dir aside."""
    from transformer.config import load_config

    record = json.loads((ROOT / "docs/results/distill/demo1h_x2_student192_12600updates_2026-11-28.json").read_text())
    goals_met = [value for key, value in record["goals"].items() if key.endswith("_met")]
    assert record["plan"]["student_config"] == "configs/student.yaml" and goals_met == [True] * 3
    measured = load_config(ROOT / "configs/student.yaml", record["plan"]["student_set"])
    large = load_config(ROOT / "configs/student_large.yaml")
    assert large.replace("train", out_dir=measured.train.out_dir) == measured
