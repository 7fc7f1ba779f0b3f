"""`make gpu-report`: every GPU figure of the project, in priority order, within a budget per call (GPU_BUDGET, 7m by
default: with start-up, the wheels' install and the last step's grace it fits an 8-minute command), each step
capped, recorded as soon as it starts and when it ends, and skipped by a later call once recorded with the same
stamp, so that the whole report takes three such calls (docs/gpu.md).

    python scripts/gpu_report.py --budget 7m            # what fits in 7 minutes, then run it again for the rest
    python scripts/gpu_report.py --only decode          # one step alone (--redo STEP runs a recorded one again)
    python scripts/gpu_report.py --cpu-smoke --results /tmp/r --budget 5m   # tiny, on the CPU (the tests)

The steps, in order (`gpu_report_steps.py` has their commands, caps and what each depends on):
1. check: `make gpu-check` (done already where gpu-check passed with the same stamp on this GPU);
2. train: `make bench-gpu`, training throughput of base and big, ours against HF Marian and nn.Transformer, MFU;
3. decode: `scripts/benchmark.py decode --device cuda`, base shape, beam 4 and greedy, ours against CTranslate2
   fp16 and HF generate (an engine that cannot run is left out, and the records say why);
4. recipe-pre-ln, recipe-post-ln: one piece of configs/bible_es_en.yaml, then of configs/bible_es_en_paper.yaml,
   through scripts/run_recipe.py --max-pieces 1.

Records, one per step: `<results>/gpu/report_<step>_<gpu>.json`, written when the step starts ("status":
"running") and when it ends: "done", "skipped" (with its reason), "failed", "capped" (stopped at its cap), or
"interrupted" (this call was stopped: SIGTERM, SIGINT or SIGHUP). Each holds the step's stamp (`stamps.py`: the
files it runs, its configs and data, the GPU, the versions of torch and the packages it uses), its command, seconds,
the records it wrote and its log, `<results>/gpu/report_<step>_<gpu>.log`, written as the output comes. A later
call skips a step recorded done, skipped, failed or capped with the same stamp (a failure is rarely fixed by
running it again unchanged: fix it, which changes the stamp, or pass --redo STEP) and runs a running or
interrupted one again, and a capped one that goes on from where it stopped (the check: its paths already passed
are not run again).

A step starts only if its cap and the grace fit in what is left of the budget; one that does not is left for the
next call, which runs it first (the order is the priority), while a later, shorter step may still run now. Each
step runs in a process group of its own (and dies with this process where Linux allows: PR_SET_PDEATHSIG). At
its cap, or when this process gets SIGTERM, SIGINT or SIGHUP, the group gets SIGTERM (the trainer saves) and,
`grace` seconds later, SIGKILL; the record then says capped or interrupted, with the last lines of the log.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from transformer.benchmarks.gpu_report_steps import (
    GRACE_S,
    STEP_NAMES,
    Report,
    Step,
    gpu_steps,
    probe_ctranslate2,
    smoke_steps,
)
from transformer.benchmarks.stamps import ROOT, code_commit, device_name, read_json, today, write_json

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class ReportStopped(Exception):  # noqa: N818 (a signal, not an error)
    """This process got a stop signal while a step ran."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signal.Signals(signum).name}")
        self.signum = signum


def _copy(source: TextIO, log: TextIO) -> None:
    for line in source:
        sys.stdout.write(line)
        sys.stdout.flush()
        log.write(line)
        log.flush()


def _own_group() -> None:
    """In the step's process, before it runs: a process group of its own (so that a cap stops all of it), and
    SIGKILL when this process dies (Linux), so that no step outlives a report killed outright."""
    os.setpgrp()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the group is stopped by the signal handlers alone
        pass


def run_capped(
    command: list[str], cap: float, log_path: Path, grace: float = GRACE_S, started=None
) -> tuple[str, int | None]:
    """Run `command` in a process group of its own, its output to the terminal and to `log_path` as it comes; at
    `cap` seconds SIGTERM to the group, SIGKILL `grace` seconds later. (done | failed | capped, exit code). A stop
    signal to this process (ReportStopped, raised by `stop_signals_raise`) stops the group the same way and
    goes on up. `started(pid)` is called once the step runs (its process group's id is `pid`)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            preexec_fn=_own_group,
        )
        reader = threading.Thread(target=_copy, args=(proc.stdout, log), daemon=True)
        reader.start()
        try:
            if started is not None:
                started(proc.pid)
            code = proc.wait(timeout=cap)
            status = "done" if code == 0 else "failed"
        except subprocess.TimeoutExpired:
            status, code = "capped", _stop(proc, grace)
        except ReportStopped:
            _stop(proc, grace)
            reader.join(timeout=grace)
            raise
        reader.join(timeout=grace)
    return status, code


def _stop(proc: subprocess.Popen, grace: float) -> int | None:
    """SIGTERM to the step's process group, then SIGKILL to it (what is left) after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:  # the leader is gone; its children may not be
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            break
    return proc.poll()


def _new_records(results: Path, since: float) -> list[Path]:
    """The JSON records in `results` (not its subfolders) written since `since` (a time.time())."""
    return sorted(p for p in results.glob("*.json") if p.stat().st_mtime >= since)


def _first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"


def _log_tail(path: Path, lines: int = 20) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def _finish(step: Step, report: Report, entry: dict, status: str, since: float) -> dict:
    """The step's records (new JSON files, its summary) given the commit and stamp, and its record written."""
    records, problem = _new_records(report.results, since) if entry["command"] else [], None
    try:
        records += step.summary(report, status) if step.summary is not None and status != "failed" else []
    except Exception as exc:  # the step's own output and log stand; the record says what was not summarised
        problem = f"no summary: {_first_line(exc)}"
        print(f"[{step.name}] {problem}", flush=True)
    for path in records:
        record = read_json(path)
        if record is not None and record.get("stamp") != entry["stamp"]:
            write_json(path, {**record, "commit": report.commit, "stamp": entry["stamp"]})
    entry = {
        **entry,
        "status": status,
        "seconds": round(time.monotonic() - entry.pop("_start"), 1),
        "records": [str(p) for p in records],
        **({"problem": problem} if problem else {}),
    }
    if status != "done":
        entry["log_tail"] = _log_tail(report.ledger(step.name, "log"))
    write_json(report.ledger(step.name), entry)
    return entry


def _command_and_run(step: Step, report: Report, entry: dict, deadline: float) -> tuple[str, int | None]:
    """Build the step's command (into `entry`) and run it until `deadline` (a time.monotonic()): (status, exit
    code)."""
    try:
        entry["command"] = " ".join(command := step.command(report))
    except ReportStopped:
        raise
    except Exception as exc:  # a step that cannot even be set up fails alone; the report goes on
        command, entry["problem"] = [], f"no command: {_first_line(exc)}"
    print(
        f"[{step.name}] running, cap {entry['cap_seconds']:.0f} s: {entry['command'] or entry['problem']}", flush=True
    )
    if not command:
        return "failed", None
    on_start = lambda pid: write_json(report.ledger(step.name), {**entry, "pgid": pid})  # noqa: E731
    return run_capped(command, deadline - time.monotonic(), Path(entry["log"]), report.grace, on_start)


def run_step(step: Step, report: Report, cap: float, stamp: str) -> dict:
    """Run one step under its cap (what building its command took, e.g. the CTranslate2 probe, included), its
    record written as "running" first and with the outcome at the end (also when this process is stopped)."""
    started, start = time.time(), time.monotonic()
    entry = {
        "kind": "gpu_report_step",
        "step": step.name,
        "status": "running",
        "device": report.device,
        "date": today(),
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "commit": report.commit,
        "stamp": stamp,
        "depends": list(step.depends),
        "packages": list(step.packages),
        "signature": step.signature,
        "command": "",
        "cap_seconds": cap,
        "log": str(report.ledger(step.name, "log")),
    }
    write_json(report.ledger(step.name), entry)
    try:
        status, code = _command_and_run(step, report, entry, start + cap)
    except ReportStopped as exc:
        _finish(
            step, report, {**entry, "_start": start, "returncode": None, "signal": str(exc)}, "interrupted", started
        )
        raise
    entry = _finish(step, report, {**entry, "_start": start, "returncode": code}, status, started)
    print(
        f"[{step.name}] {status} in {entry['seconds']:.0f} s; records: {', '.join(entry['records']) or 'none'}",
        flush=True,
    )
    return entry


def _raise_on_signal(signum: int, frame) -> None:
    for sig in STOP_SIGNALS:  # a second signal must not cut the stopping of the step short
        signal.signal(sig, signal.SIG_IGN)
    raise ReportStopped(signum)


def run_report(steps: list[Step], report: Report) -> int:
    """The steps in order, each that is not recorded and whose cap fits in what is left of the budget (one that does
    not fit is left for the next call, which runs it first; a later, shorter one may still run now). 0 when none
    failed or was capped, 1 otherwise, 128 + the signal's number when this process was stopped (the step's record
    then says interrupted)."""
    deadline = time.monotonic() + report.budget
    todo = [s for s in steps if not report.only or s.name in report.only]
    print(f"gpu-report on {report.device}, budget {report.budget:.0f} s: {', '.join(s.name for s in todo)}", flush=True)
    previous = {sig: signal.signal(sig, _raise_on_signal) for sig in STOP_SIGNALS}
    states: dict[str, str] = {}
    try:
        for step in todo:
            states[step.name] = _consider(step, report, deadline)
    except ReportStopped as exc:
        print(
            f"gpu-report: stopped by {exc} during {step.name}; its record says interrupted; run the same command "
            "again to go on",
            flush=True,
        )
        return 128 + exc.signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return _summary(states, report)


def _consider(step: Step, report: Report, deadline: float) -> str:
    """Run `step` if it is not recorded and its cap and the grace fit before `deadline`; its state."""
    stamp = report.stamp(step)
    why = None if step.name in report.redo else report.recorded(step, stamp)
    if why:
        print(f"[{step.name}] recorded with this stamp ({why}): skipped", flush=True)
        return "recorded"
    cap, left = report.caps.get(step.name, step.cap), deadline - time.monotonic()
    if cap + report.grace > left:
        print(
            f"[{step.name}] needs up to {cap + report.grace:.0f} s, {max(left, 0):.0f} s of the budget left: left "
            "for the next call",
            flush=True,
        )
        return "left"
    return run_step(step, report, cap, stamp)["status"]


def _summary(states: dict[str, str], report: Report) -> int:
    counts = {s: sorted(n for n, v in states.items() if v == s) for s in ("done", "recorded", "failed", "capped")}
    left = [n for n, v in states.items() if v == "left"]
    whole = "" if left else "; every step recorded"
    print(
        "gpu-report: "
        + "; ".join(f"{k} {', '.join(v)}" for k, v in {**counts, "left": left}.items() if v)
        + f"{whole}; records in {report.results / 'gpu'}",
        flush=True,
    )
    return 1 if counts["failed"] or counts["capped"] else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu_report.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--budget", default="7m", help="wall time for this call's steps, e.g. 7m, 420s")
    parser.add_argument("--only", help=f"comma-separated steps to consider, among {', '.join(STEP_NAMES)}")
    parser.add_argument("--redo", help="comma-separated steps to run even if recorded")
    parser.add_argument("--cap", action="append", default=[], metavar="STEP=SECONDS", help="another cap for a step")
    parser.add_argument("--results", default=str(ROOT / "docs" / "results"), help="where the records go")
    parser.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks.md"), help="the table bench-gpu rewrites")
    parser.add_argument("--commit", help="the code commit to write in records (default: $GPU_COMMIT, else git's)")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny steps on the CPU (the tests)")
    parser.add_argument("--print-commit", action="store_true", help="print the code commit and exit")
    parser.add_argument("--probe-ctranslate2", metavar="DEVICE", help=argparse.SUPPRESS)  # run by the decode step
    return parser


def _names(text: str | None, parser: argparse.ArgumentParser) -> set[str]:
    names = {n.strip() for n in (text or "").split(",") if n.strip()}
    if unknown := names - set(STEP_NAMES):
        parser.error(f"unknown step(s) {', '.join(sorted(unknown))}: use {', '.join(STEP_NAMES)}")
    return names


def _caps(items: list[str], parser: argparse.ArgumentParser) -> dict[str, float]:
    caps = {}
    for item in items:
        name, _, seconds = item.partition("=")
        _names(name, parser)
        try:
            caps[name] = float(seconds)
        except ValueError:
            parser.error(f"--cap {item}: use STEP=SECONDS, e.g. decode=300")
    return caps


def main(argv: list[str] | None = None) -> int:
    from transformer.config import parse_duration
    from transformer.errors import UserError

    parser = _parser()
    args = parser.parse_args(argv)
    if args.print_commit or args.probe_ctranslate2:
        reason = probe_ctranslate2(args.probe_ctranslate2) if args.probe_ctranslate2 else None
        print(code_commit(args.commit) if args.print_commit else reason or "ok")
        return 1 if reason else 0
    try:
        budget = parse_duration(args.budget)
    except UserError as exc:  # one line naming the accepted forms
        parser.error(f"--budget: {exc}")
    only, redo, caps = _names(args.only, parser), _names(args.redo, parser), _caps(args.cap, parser)
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print(
            "gpu-report: no CUDA device here (torch.cuda.is_available() is False), nothing to measure; "
            "--cpu-smoke runs the report on the CPU with tiny shapes"
        )
        return 0
    report = Report(
        Path(args.results),
        device_name(cuda=not args.cpu_smoke),
        code_commit(args.commit),
        budget,
        only,
        redo,
        caps,
        grace=3.0 if args.cpu_smoke else GRACE_S,
    )
    steps = smoke_steps(Path(args.results) / "smoke-runs") if args.cpu_smoke else gpu_steps(Path(args.docs))
    return run_report(steps, report)
