"""`make gpu-report`: every GPU figure of the project, in priority order, within a budget (GPU_BUDGET, 20m by
default), each step capped, recorded as soon as it ends, and skipped by a later call once recorded for this code
commit on this GPU, so that the whole report can be done in several calls of under 9 minutes each.

    python scripts/gpu_report.py --budget 9m            # what fits in 9 minutes, then run it again for the rest
    python scripts/gpu_report.py --only decode          # one step alone (--redo STEP runs a recorded one again)
    python scripts/gpu_report.py --cpu-smoke --results /tmp/r --budget 5m   # tiny, on the CPU (the tests)

The steps, in order (`gpu_report_steps.py` has their commands and caps):
1. check: `make gpu-check` (skipped too where its own stamp passed for this commit on this GPU);
2. train: `make bench-gpu`, training throughput of base and big, ours against HF Marian and nn.Transformer, MFU;
3. decode: `scripts/benchmark.py decode --device cuda`, base shape, beam 4 and greedy, ours against CTranslate2
   fp16 and HF generate (ours against HF only, with a note in the records, where CTranslate2 cannot run on this CUDA);
4. recipe-pre-ln, recipe-post-ln: one piece (6 minutes of training) of configs/bible_es_en.yaml, then of
   configs/bible_es_en_paper.yaml, through scripts/run_recipe.py --max-pieces 1.

A step starts only if its cap fits in what is left of the budget; otherwise the report stops there (the order is the
priority) and a later call goes on from it. Each step runs in a process group of its own, its output printed and
written to `<results>/gpu/report_<step>_<gpu>.log` as it comes; at its cap it gets SIGTERM (the trainer saves) and,
20 s later, SIGKILL; a capped step is recorded as such with its partial output. After each step:
`<results>/gpu/report_<step>_<gpu>.json` (status done, failed or capped, seconds, command, the records it wrote),
and every JSON record the step wrote in `<results>` gets the `commit` field. Done, failed and capped steps all count
as recorded (a failure is rarely fixed by running it again unchanged; fix, commit, or pass --redo STEP).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from transformer.benchmarks.gpu_report_steps import STEP_NAMES, Step, gpu_steps, probe_ctranslate2, smoke_steps
from transformer.benchmarks.stamps import (
    ROOT,
    UNKNOWN,
    code_commit,
    device_name,
    read_json,
    same_work,
    slug,
    today,
    write_json,
)

GRACE_S = 20.0  # between SIGTERM and SIGKILL of a capped step


@dataclass
class Report:
    """Where records go and what they belong to, the budget, and what the caller asked to run."""

    results: Path
    device: str
    commit: str
    budget: float  # seconds
    only: set[str] = field(default_factory=set)  # empty: every step
    redo: set[str] = field(default_factory=set)
    caps: dict[str, float] = field(default_factory=dict)  # cap overrides, seconds
    grace: float = GRACE_S

    def ledger(self, step: str, suffix: str = "json") -> Path:
        return self.results / "gpu" / f"report_{step}_{slug(self.device)}.{suffix}"

    def recorded(self, step: Step) -> str | None:
        """Why `step` needs no run (its ledger, or for the check a passed gpu-check stamp, for this commit and
        device), or None."""
        stamp = read_json(self.ledger(step.name))
        if same_work(stamp, self.commit, self.device):
            return f"{stamp['status']} on {stamp['date']}"
        if step.stamp is not None:
            check = read_json(step.stamp(self))
            if same_work(check, self.commit, self.device) and check.get("passed"):
                return f"gpu-check passed on {check['date']}"
        return None


def _copy(source: TextIO, log: TextIO) -> None:
    for line in source:
        sys.stdout.write(line)
        sys.stdout.flush()
        log.write(line)
        log.flush()


def run_capped(command: list[str], cap: float, log_path: Path, grace: float = GRACE_S) -> tuple[str, int | None]:
    """Run `command` in a process group of its own, its output to the terminal and to `log_path` as it comes; at
    `cap` seconds SIGTERM to the group, SIGKILL `grace` seconds later. (done | failed | capped, exit code)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True)  # fmt: skip
        reader = threading.Thread(target=_copy, args=(proc.stdout, log), daemon=True)
        reader.start()
        try:
            code = proc.wait(timeout=cap)
            status = "done" if code == 0 else "failed"
        except subprocess.TimeoutExpired:
            status, code = "capped", _stop(proc, grace)
        reader.join(timeout=grace)
    return status, code


def _stop(proc: subprocess.Popen, grace: float) -> int | None:
    """SIGTERM to the step's process group, then SIGKILL if it is still there after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return proc.poll()


def _new_records(results: Path, since: float) -> list[Path]:
    """The JSON records in `results` (not its subfolders) written since `since` (a time.time())."""
    return sorted(p for p in results.glob("*.json") if p.stat().st_mtime >= since)


def _first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"


def run_step(step: Step, report: Report, cap: float) -> dict:
    """Run one step under its cap (what building its command took, e.g. the CTranslate2 probe, included), give its
    new records the commit, write its ledger entry; the entry."""
    started, start, problem, records = time.time(), time.monotonic(), None, []
    try:
        command = step.command(report)
    except Exception as exc:  # a step that cannot even be set up fails alone; the report goes on
        command, problem = [], f"no command: {_first_line(exc)}"
    print(f"[{step.name}] running, cap {cap:.0f} s: {' '.join(command) or problem}", flush=True)
    status, code = "failed", None
    if command:
        left = cap - (time.monotonic() - start)
        status, code = run_capped(command, left, report.ledger(step.name, "log"), report.grace)
        records = _new_records(report.results, started)
    try:
        records += step.summary(report, status) if step.summary is not None and status != "failed" else []
    except Exception as exc:  # the step's own output and log stand; the ledger says what was not summarised
        problem = f"no summary: {_first_line(exc)}"
        print(f"[{step.name}] {problem}", flush=True)
    for path in records:
        record = read_json(path)
        if record is not None and record.get("commit") != report.commit:
            write_json(path, {**record, "commit": report.commit})
    entry = {"kind": "gpu_report_step", "step": step.name, "status": status, "device": report.device,
             "date": today(), "commit": report.commit, "command": " ".join(command), "cap_seconds": cap,
             "seconds": round(time.monotonic() - start, 1), "returncode": code,
             "records": [str(p) for p in records], "log": str(report.ledger(step.name, "log")),
             **({"problem": problem} if problem else {})}  # fmt: skip
    write_json(report.ledger(step.name), entry)
    print(f"[{step.name}] {status} in {entry['seconds']:.0f} s; records: {', '.join(map(str, records)) or 'none'}",
          flush=True)  # fmt: skip
    return entry


def run_report(steps: list[Step], report: Report) -> int:
    """The steps in order until the budget cannot hold the next one's cap; 1 if a step failed or was capped."""
    deadline = time.monotonic() + report.budget
    todo = [s for s in steps if not report.only or s.name in report.only]
    print(f"gpu-report on {report.device}, commit {report.commit}, budget {report.budget:.0f} s: "
          f"{', '.join(s.name for s in todo)}", flush=True)  # fmt: skip
    if report.commit == UNKNOWN:
        print("note: the commit is unknown (no git here): nothing counts as recorded; pass --commit HASH")
    states: dict[str, str] = {}
    for i, step in enumerate(todo):
        why = None if step.name in report.redo else report.recorded(step)
        if why:
            print(f"[{step.name}] recorded for this commit and device ({why}): skipped", flush=True)
            states[step.name] = "recorded"
            continue
        cap, left = report.caps.get(step.name, step.cap), deadline - time.monotonic()
        if cap > left:
            print(f"[{step.name}] needs up to {cap:.0f} s, {max(left, 0):.0f} s of the budget left: stopping here; "
                  "run the same command again to go on", flush=True)  # fmt: skip
            states.update({s.name: "left" for s in todo[i:]})
            break
        states[step.name] = run_step(step, report, cap)["status"]
    counts = {s: sorted(n for n, v in states.items() if v == s) for s in ("done", "recorded", "failed", "capped")}
    left = [n for n, v in states.items() if v == "left"]
    print("gpu-report: " + "; ".join(f"{k} {', '.join(v)}" for k, v in {**counts, "left": left}.items() if v) +
          f"; records in {report.results}", flush=True)  # fmt: skip
    return 1 if counts["failed"] or counts["capped"] else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu_report.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--budget", default="20m", help="wall time for this call, e.g. 9m, 20m, 540s")
    parser.add_argument("--only", help=f"comma-separated steps to consider, among {', '.join(STEP_NAMES)}")
    parser.add_argument("--redo", help="comma-separated steps to run even if recorded")
    parser.add_argument("--cap", action="append", default=[], metavar="STEP=SECONDS", help="another cap for a step")
    parser.add_argument("--results", default=str(ROOT / "docs" / "results"), help="where the records go")
    parser.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks.md"), help="the table bench-gpu rewrites")
    parser.add_argument("--commit", help="the code commit to record (default: $GPU_COMMIT, else git's)")
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
        print("gpu-report: no CUDA device here (torch.cuda.is_available() is False), nothing to measure; "
              "--cpu-smoke runs the report on the CPU with tiny shapes")  # fmt: skip
        return 0
    report = Report(Path(args.results), device_name(cuda=not args.cpu_smoke), code_commit(args.commit), budget, only,
                    redo, caps, grace=5.0 if args.cpu_smoke else GRACE_S)  # fmt: skip
    steps = smoke_steps(Path(args.results) / "smoke-runs") if args.cpu_smoke else gpu_steps(Path(args.docs))
    return run_report(steps, report)
