"""`make gpu-report` on the CPU: the cap stops a step and keeps its output; steps run in order while the budget
holds their caps; recorded steps are skipped for the same stamp and run again when it changes or on request; a
report stopped by a signal stops its step's process group and records it as interrupted, and the next call runs
it; the stamps follow the files; MFU's peak by GPU name; the decode step's fallback without CTranslate2; a recipe
piece's record; and the whole report in its CPU smoke mode (slow)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_gpu_check import SMOKE_DETAILS

from transformer.benchmarks.gpu_report import Report, run_capped, run_report
from transformer.benchmarks.gpu_report_steps import STEP_NAMES, Step, decode_engines, gpu_steps, piece_record
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


def _bare_python(tmp_path: Path) -> str:
    """A Python with this venv's packages but not this project: a venv whose .pth file names the venv's
    site-packages as a plain path, so that the editable install's own .pth (its import hook) is never run."""
    import site
    import sysconfig

    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    purelib.mkdir(parents=True, exist_ok=True)
    (purelib / "deps.pth").write_text("".join(f"{p}\n" for p in site.getsitepackages()))
    return str(venv / "bin" / "python")


def _wait_for(path: Path, status: str, seconds: float = 300) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        record = json.loads(path.read_text()) if path.is_file() else {}
        if record.get("status") == status and record.get("pgid"):
            return record
        time.sleep(0.2)
    raise AssertionError(f"{path} never said {status}")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file() or not shutil.which("timeout"), reason="/proc, timeout")
def test_dress_rehearsal_of_a_gpu_window_on_the_cpu(tmp_path):
    """The window's sequence as it runs on the GPU machine, in smoke mode: a copy of the tree without git, a Python
    without this project (PYTHONPATH at the copy), each command under `timeout`: `make gpu-check`; `make gpu-report`
    stopped part-way by SIGTERM to its top process while the train step runs; `make gpu-report` again, which goes
    on from there. The records add up to a complete report, and no step process outlives the stop."""
    tree, results = tmp_path / "tree", tmp_path / "results"
    skip = (".git", ".venv", "runs", "cache", ".whl", "__pycache__", ".pytest_cache", ".ruff_cache", "*.egg-info")
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(*skip))
    python = _bare_python(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PYTHONPATH=str(tree), CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    found = subprocess.run(
        [python, "-c", "import transformer; print(transformer.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.stdout.startswith(str(tree)), found.stdout + found.stderr
    make = ["make", "-C", str(tree), f"GPU_PYTHON={python}", "GPU_BUDGET=10m"]
    smoke = f"GPU_ARGS=--cpu-smoke --results {results}"
    check = subprocess.run(
        ["timeout", "-k", "10", "600", *make, "gpu-check", f"GPU_ARGS=--cpu-smoke --records {results / 'gpu'}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=700,
    )
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
    checked = json.loads((results / "gpu" / f"gpu_check_{slug(cpu_name())}.json").read_text())
    assert checked["passed"] and [r["path"] for r in checked["results"]] == list(SMOKE_DETAILS)
    for r in checked["results"]:  # every path passes on the CPU (an export skips only without its package)
        assert (r["status"] == "PASS" and SMOKE_DETAILS[r["path"]] in r["detail"]) or (
            r["status"] == "SKIP" and "not installed" in r["detail"]
        ), r

    report_command = [python, "scripts/gpu_report.py", "--cpu-smoke", "--results", str(results), "--budget", "10m"]
    top = subprocess.Popen(
        ["timeout", "-k", "10", "600", *report_command], cwd=tree, env=env, stdout=subprocess.PIPE, text=True
    )
    device = slug(cpu_name())
    running = _wait_for(results / "gpu" / f"report_train_{device}.json", "running")
    report = next(pid for pid in _pids() if _stat(pid)[1:2] == [str(top.pid)])  # timeout's child: the report
    os.kill(report, signal.SIGTERM)  # the top process of the report, not its group
    first = top.communicate(timeout=120)[0]
    assert top.returncode == 128 + signal.SIGTERM, first[-3000:]
    assert "[check] recorded with this stamp (done on" in first
    time.sleep(1)
    assert not _group_alive(running["pgid"])
    assert json.loads((results / "gpu" / f"report_train_{device}.json").read_text())["status"] == "interrupted"

    again = subprocess.run(
        ["timeout", "-k", "10", "600", *make, "gpu-report", smoke], env=env, capture_output=True, text=True, timeout=700
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    assert "every step recorded" in again.stdout
    records = {step: json.loads((results / "gpu" / f"report_{step}_{device}.json").read_text()) for step in STEP_NAMES}
    assert {step: r["status"] for step, r in records.items()} == dict.fromkeys(STEP_NAMES, "done")
    assert all(r["stamp"] and r["commit"] == "unknown" for r in records.values())  # no git in the copy
    kinds = [json.loads(p.read_text())["kind"] for p in results.glob("*.json")]
    assert kinds.count("train_throughput") == 1 and kinds.count("decode") == 2 and kinds.count("recipe_piece") == 2
    last = subprocess.run(["timeout", "60", *make, "gpu-report", smoke], env=env, capture_output=True, text=True)
    assert last.returncode == 0 and "running" not in last.stdout and last.stdout.count("skipped") == 5


DRIVER = """
import sys
from pathlib import Path
from transformer.benchmarks.gpu_report import Report, run_report
from transformer.benchmarks.gpu_report_steps import Step
child = "import time; time.sleep(120)"
work = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', %r]); print('working', flush=True); "
        "time.sleep(120)") % child
step = Step("train", 300, lambda report: [sys.executable, "-c", work])
sys.exit(run_report([step], Report(Path(sys.argv[1]), "GPU Z", "c1", 600, grace=1.0)))
"""


def _alive(pid: int) -> bool:
    """Is `pid` a process that is not a zombie?"""
    return _stat(pid)[:1] not in ([], ["Z"])


def _group_alive(pgid: int) -> bool:
    return any(_alive(pid) for pid in _pids() if _pgid(pid) == pgid)


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command's name: state, ppid, pgrp, ...; [] once the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _pgid(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[2]) if len(fields) > 2 else None


def _running_step(tmp_path: Path) -> tuple[subprocess.Popen, dict]:
    """The driver started, once its step (and the step's child) run: (the driver, the step's running record)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen([PY, "-c", DRIVER, str(tmp_path)], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    ledger, log = tmp_path / "gpu/report_train_gpu-z.json", tmp_path / "gpu/report_train_gpu-z.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (log.is_file() and "working" in log.read_text()):
        time.sleep(0.1)
    record = json.loads(ledger.read_text())
    assert record["status"] == "running" and record["pgid"] > 0 and _group_alive(record["pgid"])
    return driver, record


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc")
def test_a_stopped_report_stops_its_step_and_records_it(tmp_path):
    """SIGTERM to the report (not its group): the step's process group (the step and its child) is stopped, the
    record says interrupted with the log's last lines, the exit code is 128 + 15; the next call runs the step."""
    driver, record = _running_step(tmp_path)
    driver.send_signal(signal.SIGTERM)
    assert driver.wait(timeout=60) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 10
    while _group_alive(record["pgid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _group_alive(record["pgid"])
    stopped = json.loads((tmp_path / "gpu/report_train_gpu-z.json").read_text())
    assert stopped["status"] == "interrupted" and stopped["log_tail"] == ["working"] and "SIGTERM" in stopped["signal"]
    assert stopped["stamp"] == record["stamp"]
    report = Report(tmp_path, "GPU Z", "c1", 600)
    step = Step("train", 300, lambda r: [])
    assert report.recorded(step, record["stamp"]) is None  # interrupted: the next call runs it


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc")
def test_a_report_killed_outright_takes_its_step_with_it(tmp_path):
    """SIGKILL to the report: the step (PR_SET_PDEATHSIG) dies with it; the record stays readable, "running"."""
    driver, record = _running_step(tmp_path)
    driver.kill()
    driver.wait(timeout=60)
    deadline = time.monotonic() + 10
    while _alive(record["pgid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(record["pgid"])  # the step itself; its own children are the group's, see docs/gpu.md
    for pid in _pids():
        if _pgid(pid) == record["pgid"] and _alive(pid):
            os.kill(pid, signal.SIGKILL)  # the step's child, orphaned: this test's own cleanup
    assert json.loads((tmp_path / "gpu/report_train_gpu-z.json").read_text())["status"] == "running"
