"""`make gpu-report` on the CPU: the cap stops a step and keeps its output; steps run in order while the budget
holds their caps; recorded steps are skipped for the same stamp and run again when it changes or on request; a
failed step is recorded and the report goes on; the stamps follow the files; MFU's peak by GPU name; the decode
step's fallback without CTranslate2; a recipe piece's record. The report's processes under signals, and the whole
report in its CPU smoke mode, are tests/test_gpu_report_processes.py's."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from transformer.benchmarks.gpu_report import Report, run_capped, run_report
from transformer.benchmarks.gpu_report_steps import STEP_NAMES, Step, decode_engines, gpu_steps, piece_record
from transformer.benchmarks.stamps import write_json

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def test_a_capped_step_is_stopped_and_its_output_kept(tmp_path):
    log = tmp_path / "step.log"
    start = time.monotonic()
    status, code = run_capped([PY, "-c", "print('half done', flush=True); import time; time.sleep(60)"], 1.0, log)
    assert status == "capped" and code is not None and code < 0 and time.monotonic() - start < 30
    assert log.read_text() == "half done\n"
    deaf = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('deaf', flush=True); time.sleep(60)"
    )
    start = time.monotonic()
    assert run_capped([PY, "-c", deaf], 1.0, log, grace=1.0) == ("capped", -9)  # SIGKILL after the grace
    assert time.monotonic() - start < 30 and log.read_text() == "deaf\n"
    assert run_capped([PY, "-c", "import sys; sys.exit(3)"], 10.0, log) == ("failed", 3)
    assert run_capped([PY, "-c", "pass"], 10.0, log) == ("done", 0)


def _step(name: str, cap: float, trace: Path, code: int = 0, record: bool = False, signature: str = "") -> Step:
    """A step that appends its name to `trace`, optionally writes a JSON record into the results, exits `code`."""

    def command(report: Report) -> list[str]:
        write = f"open(r'{report.results / name}.json', 'w').write('{{\"kind\": \"x\"}}')" if record else "None"
        return [PY, "-c", f"open(r'{trace}', 'a').write('{name} '); {write}; raise SystemExit({code})"]

    return Step(name, cap, command, signature=signature)


def _report(tmp_path: Path, budget: float, commit: str = "c1", **kwargs) -> Report:
    return Report(tmp_path / "results", "GPU Z", commit, budget, grace=1.0, **kwargs)


def test_order_budget_skipping_redo_and_records(tmp_path, capsys):
    trace = tmp_path / "trace"
    steps = [
        _step("check", 10, trace, record=True),
        _step("train", 10, trace),
        _step("decode", 100, trace),
        _step("recipe-pre-ln", 10, trace),
    ]
    assert run_report(steps, _report(tmp_path, budget=50)) == 0
    assert trace.read_text() == "check train recipe-pre-ln "  # decode's cap (100 s) does not fit: left for later
    out = capsys.readouterr().out
    assert "[decode] needs up to 101 s" in out and "left for the next call" in out and "left decode" in out
    ledger = json.loads((tmp_path / "results/gpu/report_check_gpu-z.json").read_text())
    assert ledger["status"] == "done" and ledger["commit"] == "c1" and ledger["device"] == "GPU Z"
    assert ledger["stamp"] and ledger["records"] == [str(tmp_path / "results/check.json")]
    assert json.loads((tmp_path / "results/check.json").read_text()) == {
        "kind": "x",
        "commit": "c1",
        "stamp": ledger["stamp"],
    }
    assert (tmp_path / "results/gpu/report_train_gpu-z.log").is_file()

    assert run_report(steps, _report(tmp_path, budget=500)) == 0  # again: the recorded steps are skipped
    assert trace.read_text() == "check train recipe-pre-ln decode "
    out = capsys.readouterr().out
    assert "[check] recorded with this stamp (done on " in out and "every step recorded" in out
    assert run_report(steps, _report(tmp_path, budget=500, redo={"train"}, only={"train", "decode"})) == 0
    assert trace.read_text().endswith("decode train ")
    assert run_report(steps, _report(tmp_path, budget=500, commit="c2")) == 0  # another commit alone: nothing
    assert trace.read_text().endswith("decode train ")
    steps[1] = _step("train", 10, trace, signature="--shapes big")  # what train measures changed: it runs again
    assert run_report(steps, _report(tmp_path, budget=500)) == 0
    assert trace.read_text().endswith("decode train train ")


def test_a_capped_step_that_goes_on_runs_again(tmp_path):
    """Capped steps stay recorded (the same cap would stop them again), except one that goes on from where it
    stopped (the check), which the next call runs."""
    trace, report = tmp_path / "trace", _report(tmp_path, budget=100)
    sleepy = lambda report: [PY, "-c", f"open(r'{trace}', 'a').write('x '); import time; time.sleep(30)"]  # noqa: E731
    steps = [Step("check", 1, sleepy, resumable=True), Step("train", 1, sleepy)]
    assert run_report(steps, report) == 1
    assert run_report(steps, report) == 1
    assert trace.read_text() == "x x x "  # check twice, train once
    assert json.loads((tmp_path / "results/gpu/report_train_gpu-z.json").read_text())["status"] == "capped"


def test_stamps_follow_the_files_a_step_runs(tmp_path, monkeypatch):
    from transformer.benchmarks import stamps

    monkeypatch.setattr(stamps, "ROOT", tmp_path)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "a.py").write_text("a = 1\n")
    (tmp_path / "lib" / "b.py").write_text("b = 1\n")
    (tmp_path / "config.yaml").write_text("x: 1\n")
    first = stamps.dependency_stamp(["lib/a.py", "config.yaml"], "GPU Z")
    assert first == stamps.dependency_stamp(["config.yaml", "lib/a.py"], "GPU Z")  # order does not matter
    assert first != stamps.dependency_stamp(["lib/a.py", "config.yaml"], "GPU Y")  # another GPU
    whole = stamps.dependency_stamp(["lib"])
    assert whole == stamps.dependency_stamp(["lib/*.py"])  # a folder walked = its files by pattern
    (tmp_path / "lib" / "__pycache__").mkdir()
    (tmp_path / "lib" / "__pycache__" / "a.pyc").write_bytes(b"\0")
    assert stamps.dependency_stamp(["lib"]) == whole  # written by running the code: not part of it
    (tmp_path / "lib" / "b.py").write_text("b = 2\n")  # a fix in b changes the stamps that include b only
    assert stamps.dependency_stamp(["lib/a.py", "config.yaml"], "GPU Z") == first
    assert stamps.dependency_stamp(["lib"]) != whole
    (tmp_path / "config.yaml").write_text("x: 2\n")
    assert stamps.dependency_stamp(["lib/a.py", "config.yaml"], "GPU Z") != first


def test_steps_depend_on_what_they_run():
    """Each GPU step's stamp covers the files it runs: a change to decoding moves the decode and recipe stamps,
    not the training benchmark's; the check covers the library."""
    from transformer.benchmarks.stamps import _files

    steps = {s.name: s for s in gpu_steps(ROOT / "docs" / "benchmarks.md")}
    assert tuple(steps) == STEP_NAMES
    covered = {n: {f.relative_to(ROOT).as_posix() for d in s.depends for f in _files(d)} for n, s in steps.items()}
    search = "transformer/decoding/search.py"
    assert search in covered["decode"] and search not in covered["train"]
    assert "scripts/bench_gpu.py" in covered["train"] and "scripts/bench_gpu.py" not in covered["check"]
    assert {"configs/bible_es_en.yaml", "data/bible-es-en/train.tsv.xz"} <= covered["recipe-pre-ln"]
    assert "configs/bible_es_en_paper.yaml" not in covered["recipe-pre-ln"]
    for module in ("transformer/training/trainer.py", "transformer/model/attention.py", "scripts/gpu_check.py"):
        assert module in covered["check"]
    assert all(s.packages is not None for s in steps.values())


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("Some GPU", None),
    ],
)
def test_peak_by_gpu_name(name, peak):
    from transformer.benchmarks.gpu_peaks import peak_tflops

    found = peak_tflops(name)
    assert (found[0] if found else None) == peak


def test_a_failed_step_is_recorded_and_the_report_goes_on(tmp_path):
    trace = tmp_path / "trace"
    steps = [_step("check", 10, trace, code=1), _step("train", 10, trace)]
    assert run_report(steps, _report(tmp_path, budget=100)) == 1
    assert trace.read_text() == "check train "
    assert json.loads((tmp_path / "results/gpu/report_check_gpu-z.json").read_text())["returncode"] == 1
    assert run_report(steps, _report(tmp_path, budget=100)) == 0  # recorded (as failed): not run again unasked
    assert trace.read_text() == "check train "


def test_a_step_that_cannot_be_set_up_fails_alone(tmp_path):
    def broken(report):
        raise FileNotFoundError("configs/missing.yaml")

    trace = tmp_path / "trace"
    assert run_report([Step("decode", 10, broken), _step("recipe-pre-ln", 10, trace)], _report(tmp_path, 100)) == 1
    ledger = json.loads((tmp_path / "results/gpu/report_decode_gpu-z.json").read_text())
    assert ledger["status"] == "failed" and ledger["problem"] == "no command: FileNotFoundError: configs/missing.yaml"
    assert trace.read_text() == "recipe-pre-ln "


def test_the_check_step_is_done_where_gpu_check_passed_alone_with_its_stamp(tmp_path):
    trace, report = tmp_path / "trace", _report(tmp_path, budget=100)
    step = gpu_steps(tmp_path / "benchmarks.md")[0]
    step = Step(
        "check",
        10,
        _step("check", 10, trace).command,
        step.summary,
        step.depends,
        step.packages,
        step.signature,
        step.adopt,
    )
    record = tmp_path / "results/gpu/gpu_check_gpu-z.json"
    write_json(
        record,
        {"kind": "gpu_check", "stamp": report.stamp(step), "device": "GPU Z", "date": "2026-12-01", "passed": False},
    )
    run_report([step], report)
    assert trace.read_text() == "check "  # it failed there: run it
    (tmp_path / "results/gpu/report_check_gpu-z.json").unlink()
    write_json(record, {**json.loads(record.read_text()), "stamp": "another", "passed": True})
    run_report([step], report)
    assert trace.read_text() == "check check "  # passed, but for other code
    (tmp_path / "results/gpu/report_check_gpu-z.json").unlink()
    write_json(record, {**json.loads(record.read_text()), "stamp": report.stamp(step), "passed": True})
    run_report([step], report)
    assert trace.read_text() == "check check "
    ledger = json.loads((tmp_path / "results/gpu/report_check_gpu-z.json").read_text())
    assert ledger["status"] == "done" and "gpu-check passed alone" in ledger["adopted"]


def test_decode_without_ctranslate2_compares_ours_with_hf_and_says_so():
    assert decode_engines(None) == ("ours,ctranslate2,hf", [])
    engines, note = decode_engines("RuntimeError: Library libcublas.so.12 is not found")
    assert engines == "ours,hf" and note[0] == "--note"
    assert note[1] == (
        "CTranslate2 cannot run on this machine (RuntimeError: Library libcublas.so.12 is not found): "
        "ours against HF generate only"
    )


def test_a_recipe_piece_record(tmp_path):
    state = {
        "step": 2400,
        "elapsed": 363.0,
        "done": False,
        "best": 21.5,
        "pieces": [{"piece_start_step": 0, "step": 2400, "elapsed": 363.0, "reason": "max_time"}],
    }
    (tmp_path / "recipe.json").write_text(json.dumps(state))
    metrics = [
        {"step": 1000, "loss": 4.1},
        {"step": 1000, "valid_loss": 3.9, "valid_bleu": 12.5},
        {"step": 2000, "loss": 3.2},
        {"step": 2000, "valid_loss": 3.1, "valid_bleu": 21.5},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    record = piece_record(
        tmp_path,
        name="bible_es_en",
        config="configs/bible_es_en.yaml",
        command="python x",
        report=_report(tmp_path, 1),
        status="done",
    )
    assert record["kind"] == "recipe_piece" and record["updates"] == 2400 and record["train_minutes"] == 6.05
    assert record["validations"] == [
        {"step": 1000, "valid_loss": 3.9, "valid_bleu": 12.5},
        {"step": 2000, "valid_loss": 3.1, "valid_bleu": 21.5},
    ]
    assert record["last_train"] == {"step": 2000, "loss": 3.2} and record["stop_reason"] == "max_time"
    assert record["device"] == "GPU Z" and record["commit"] == "c1" and record["best_valid"] == 21.5
