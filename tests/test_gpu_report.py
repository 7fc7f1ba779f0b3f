"""`make gpu-report` on the CPU: the cap stops a step and keeps its output; steps run in order until the budget
cannot hold the next; recorded steps are skipped for the same commit and device and redone on request; records get
the commit; the decode step's fallback without CTranslate2; a recipe piece's record; and the whole report in its
CPU smoke mode (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transformer.benchmarks import gpu_report
from transformer.benchmarks.gpu_report import Report, run_capped, run_report
from transformer.benchmarks.gpu_report_steps import Step, decode_engines, piece_record
from transformer.benchmarks.stamps import cpu_name, slug, write_json

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


def _step(name: str, cap: float, trace: Path, code: int = 0, record: bool = False) -> Step:
    """A step that appends its name to `trace`, optionally writes a JSON record into the results, exits `code`."""

    def command(report: Report) -> list[str]:
        write = f"open(r'{report.results / name}.json', 'w').write('{{\"kind\": \"x\"}}')" if record else "None"
        return [PY, "-c", f"open(r'{trace}', 'a').write('{name} '); {write}; raise SystemExit({code})"]

    return Step(name, cap, command)


def _report(tmp_path: Path, budget: float, commit: str = "c1", **kwargs) -> Report:
    return Report(tmp_path / "results", "GPU Z", commit, budget, grace=1.0, **kwargs)


def test_order_budget_skipping_redo_and_records(tmp_path, capsys):
    trace = tmp_path / "trace"
    steps = [_step("check", 10, trace, record=True), _step("train", 10, trace), _step("decode", 100, trace),
             _step("recipe-pre-ln", 10, trace)]  # fmt: skip
    assert run_report(steps, _report(tmp_path, budget=50)) == 0
    assert trace.read_text() == "check train "  # decode's cap (100 s) is more than the 30-odd s left: stop there
    out = capsys.readouterr().out
    assert "[decode] needs up to 100 s" in out and "left decode, recipe-pre-ln" in out
    ledger = json.loads((tmp_path / "results/gpu/report_check_gpu-z.json").read_text())
    assert ledger["status"] == "done" and ledger["commit"] == "c1" and ledger["device"] == "GPU Z"
    assert ledger["records"] == [str(tmp_path / "results/check.json")]
    assert json.loads((tmp_path / "results/check.json").read_text()) == {"kind": "x", "commit": "c1"}
    assert (tmp_path / "results/gpu/report_train_gpu-z.log").is_file()

    assert run_report(steps, _report(tmp_path, budget=500)) == 0  # again: the recorded steps are skipped
    assert trace.read_text() == "check train decode recipe-pre-ln "
    assert "[check] recorded for this commit and device (done on " in capsys.readouterr().out
    assert run_report(steps, _report(tmp_path, budget=500, redo={"train"}, only={"train", "decode"})) == 0
    assert trace.read_text().endswith("recipe-pre-ln train ")
    assert run_report(steps, _report(tmp_path, budget=500, commit="c2")) == 0  # another commit: everything again
    assert run_report(steps, _report(tmp_path, budget=500, commit="unknown")) == 0  # unknown: never recorded
    assert trace.read_text().count("check") == 3


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


def test_the_check_step_is_skipped_where_gpu_check_passed_for_this_commit(tmp_path):
    trace = tmp_path / "trace"
    step = _step("check", 10, trace)
    stamp = tmp_path / "results/gpu/gpu_check_gpu-z.json"
    step = Step(step.name, step.cap, step.command, stamp=lambda report: stamp)
    write_json(stamp, {"kind": "gpu_check", "commit": "c1", "device": "GPU Z", "date": "2026-12-01", "passed": False})
    run_report([step], _report(tmp_path, budget=100))
    assert trace.read_text() == "check "  # it failed there: run it
    (tmp_path / "results/gpu/report_check_gpu-z.json").unlink()
    write_json(stamp, {"kind": "gpu_check", "commit": "c1", "device": "GPU Z", "date": "2026-12-01", "passed": True})
    run_report([step], _report(tmp_path, budget=100))
    assert trace.read_text() == "check "


def test_decode_without_ctranslate2_compares_ours_with_hf_and_says_so():
    assert decode_engines(None) == ("ours,ctranslate2,hf", [])
    engines, note = decode_engines("RuntimeError: Library libcublas.so.12 is not found")
    assert engines == "ours,hf" and note[0] == "--note"
    assert note[1] == ("CTranslate2 cannot run on this machine (RuntimeError: Library libcublas.so.12 is not found): "
                       "ours against HF generate only")  # fmt: skip


def test_a_recipe_piece_record(tmp_path):
    state = {"step": 2400, "elapsed": 363.0, "done": False, "best": 21.5,
             "pieces": [{"piece_start_step": 0, "step": 2400, "elapsed": 363.0, "reason": "max_time"}]}  # fmt: skip
    (tmp_path / "recipe.json").write_text(json.dumps(state))
    metrics = [{"step": 1000, "loss": 4.1}, {"step": 1000, "valid_loss": 3.9, "valid_bleu": 12.5},
               {"step": 2000, "loss": 3.2}, {"step": 2000, "valid_loss": 3.1, "valid_bleu": 21.5}]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    record = piece_record(tmp_path, name="bible_es_en", config="configs/bible_es_en.yaml", command="python x",
                          report=_report(tmp_path, 1), status="done")  # fmt: skip
    assert record["kind"] == "recipe_piece" and record["updates"] == 2400 and record["train_minutes"] == 6.05
    assert record["validations"] == [{"step": 1000, "valid_loss": 3.9, "valid_bleu": 12.5},
                                     {"step": 2000, "valid_loss": 3.1, "valid_bleu": 21.5}]  # fmt: skip
    assert record["last_train"] == {"step": 2000, "loss": 3.2} and record["stop_reason"] == "max_time"
    assert record["device"] == "GPU Z" and record["commit"] == "c1" and record["best_valid"] == 21.5


@pytest.mark.slow
def test_cpu_smoke_report_in_order_recorded_skipped_and_capped(tmp_path):
    """The whole report on the CPU with tiny shapes. The check is skipped by its passed stamp (its own smoke run is
    tests/test_gpu_check.py's); the other steps run in order and leave records with the commit; a second call runs
    nothing; a third redoes the decode step under a 1-second cap, which stops it."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    results, device = tmp_path / "results", cpu_name()
    write_json(results / "gpu" / f"gpu_check_{slug(device)}.json", {"kind": "gpu_check", "commit": "smoke1",
               "device": device, "date": "2026-12-01", "passed": True})  # fmt: skip
    command = [PY, "scripts/gpu_report.py", "--cpu-smoke", "--results", str(results), "--commit", "smoke1", "--budget",
               "600s"]  # fmt: skip
    run = lambda *extra: subprocess.run([*command, *extra], cwd=ROOT, env=env, capture_output=True, text=True,
                                        timeout=400)  # fmt: skip
    first = run()
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    started = [line.split("]")[0][1:] for line in first.stdout.splitlines() if "] running, cap" in line]
    assert started == ["train", "decode", "recipe-pre-ln", "recipe-post-ln"]
    assert "[check] recorded for this commit and device (gpu-check passed on 2026-12-01)" in first.stdout
    kinds = {}
    for path in results.glob("*.json"):
        record = json.loads(path.read_text())
        assert record["commit"] == "smoke1" and {"device", "date", "command"} <= record.keys(), path
        kinds.setdefault(record["kind"], []).append(path.name)
    assert len(kinds["train_throughput"]) == 1 and len(kinds["decode"]) == 2 and len(kinds["recipe_piece"]) == 2
    second = run()
    assert second.returncode == 0 and "running" not in second.stdout and second.stdout.count("skipped") == 5
    third = run("--redo", "decode", "--cap", "decode=1")
    assert third.returncode == 1 and "[decode] capped" in third.stdout
    ledger = json.loads((results / "gpu" / f"report_decode_{slug(device)}.json").read_text())
    assert ledger["status"] == "capped" and ledger["cap_seconds"] == 1.0
    assert not list((ROOT / "docs" / "results").glob("*tiny*"))  # smoke records never land in docs/results
    assert gpu_report.STEP_NAMES == ("check", "train", "decode", "recipe-pre-ln", "recipe-post-ln")
