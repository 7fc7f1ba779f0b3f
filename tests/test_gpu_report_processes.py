"""`make gpu-report`'s processes on the CPU: a report stopped by a signal stops its step's process group and
records it as interrupted, and the next call runs it; a report killed outright takes its step with it; and the
dress rehearsal of a GPU window, the whole report in its CPU smoke mode (slow)."""

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

from transformer.benchmarks.gpu_report import Report
from transformer.benchmarks.gpu_report_steps import STEP_NAMES, Step
from transformer.benchmarks.stamps import cpu_name, slug

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


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


def _copy_without_git(tmp_path: Path) -> tuple[Path, str, dict[str, str]]:
    """A copy of the tree without git, a Python without this project, and the environment that runs the copy's
    code with it (PYTHONPATH at the copy, no CUDA, one thread): (the copy, the Python, the environment)."""
    tree = tmp_path / "tree"
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
    return tree, python, env


def _stop_the_report_in_its_train_step(tree: Path, python: str, env: dict[str, str], results: Path) -> None:
    """scripts/gpu_report.py under `timeout`, stopped by SIGTERM to its top process (not its group) while the
    train step runs: it exits 128 + 15 with the check recorded, the train step's process group is gone, and the
    train step's record says interrupted."""
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


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file() or not shutil.which("timeout"), reason="/proc, timeout")
def test_dress_rehearsal_of_a_gpu_window_on_the_cpu(tmp_path):
    """The window's sequence as it runs on the GPU machine, in smoke mode: a copy of the tree without git, a Python
    without this project (PYTHONPATH at the copy), each command under `timeout`: `make gpu-check`; `make gpu-report`
    stopped part-way by SIGTERM to its top process while the train step runs; `make gpu-report` again, which goes
    on from there. The records add up to a complete report, and no step process outlives the stop."""
    results = tmp_path / "results"
    tree, python, env = _copy_without_git(tmp_path)
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

    _stop_the_report_in_its_train_step(tree, python, env, results)

    device = slug(cpu_name())
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
    assert last.returncode == 0 and "running" not in last.stdout and last.stdout.count("skipped") == len(STEP_NAMES)


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
