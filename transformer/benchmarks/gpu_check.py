"""`make gpu-check`: every CUDA path of the project run once on a tiny model, one PASS/FAIL/SKIP line each (its time
on a GPU is an estimate, not yet measured: docs/gpu.md; the report caps it at 280 s).

    python scripts/gpu_check.py               # on a GPU; without CUDA it says so in one line and exits 0
    python scripts/gpu_check.py --cpu-smoke   # the same checks on the CPU, tiny (what the tests run)

The paths, in order (gpu_check_training.py, gpu_check_processes.py, gpu_check_decoding.py and gpu_check_engines.py
say what each is held against): bf16 training with a forced overflow; fp16 with the fused Adam, the loss scaler and
a forced overflow; the prefetcher; torch.compile with length buckets and dynamic shapes; the full-logits loss with
validation and its greedy BLEU; `torchrun --nproc_per_node 1` with 2 micro-batches per update (DDP's no_sync); an
fp16 run stopped by SIGTERM and resumed (the scaler's state); greedy and beam-4 decoding in bf16/fp16 against fp32;
`transformer-evaluate --precision auto`; an ensemble with alignments and attention maps, and `transformer-score`;
the export to Hugging Face and to CTranslate2, each loaded in a process of its own (SKIP where the package is
missing or the engine cannot load). The model is configs/tiny.yaml on 1,000 short Bible verses
(data/bible-es-en/short); the decoding paths use a configs/demo.yaml model trained there for 1,000 updates.

Tolerances, as the largest relative difference of a per-update training loss: the same computation in another
process or with the batches made another way (prefetch, torchrun, kill-resume, the full-logits loss) 1e-5 on the
CPU, where it is deterministic up to thread scheduling, and 5e-3 on CUDA, whose backward kernels add in a varying
order (atomics); compiled against eager, with dropout 0 and in fp32 so that only the kernels differ, 1e-4 on the
CPU and 1e-3 on CUDA (TF32 matrix products in both): a 0.5% error in any loss fails it. A wrong batch, a lost random
state or a stale weight moves a loss by whole percents.

Record: `gpu_check_<device>.json` in --records (default docs/results/gpu/): the stamp (stamps.py: what the check
runs, the GPU, the versions of torch and the optional packages), the code commit, device, date, command, and each
path's status, detail and seconds, rewritten after every path; `passed` is true once every path ran and none failed,
and `make gpu-report` then counts its check step done. A check stopped part-way (or failing) goes on next time:
the paths its record passed or skipped with the same stamp are not run again. `--only PATHS` runs some paths (the
runs they compare with are made first) and writes `gpu_check_<device>_partial.json`. Exit code 1 when a path
failed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from transformer.benchmarks import gpu_check_decoding as decoding
from transformer.benchmarks import gpu_check_engines as engines
from transformer.benchmarks import gpu_check_processes as processes
from transformer.benchmarks import gpu_check_training as training
from transformer.benchmarks.gpu_check_runs import (
    CHECK_DEPENDS,
    CHECK_PACKAGES,
    GPU_SIZES,
    SMOKE_SIZES,
    CheckFailedError,
    CheckSkippedError,
    Context,
    check_signature,
)
from transformer.benchmarks.stamps import (
    ROOT,
    code_commit,
    device_name,
    read_json,
    slug,
    step_stamp,
    today,
    write_json,
)

CHECKS: list[tuple[str, Callable[[Context], str]]] = [
    ("bf16", training.check_bf16),
    ("fp16-scaler", training.check_fp16_scaler),
    ("prefetch", training.check_prefetch),
    ("compile-buckets", training.check_compile),
    ("unfused-loss", training.check_unfused_loss),
    ("torchrun", processes.check_torchrun),
    ("kill-resume", processes.check_kill_resume),
    ("decode", decoding.check_decode),
    ("graphs", decoding.check_graphs),
    ("evaluate", decoding.check_evaluate),
    ("inspect", decoding.check_inspect),
    ("export-hf", engines.check_export_hf),
    ("export-ctranslate2", engines.check_export_ctranslate2),
]
TOLERANCES = {"cuda": (5e-3, 1e-3), "cpu": (1e-5, 1e-4)}  # (same computation, compiled against eager): see above
DEFAULT_RECORDS = ROOT / "docs" / "results" / "gpu"


@dataclass
class Outcome:
    path: str
    status: str  # PASS, FAIL or SKIP
    detail: str
    seconds: float


def run_one(name: str, check: Callable[[Context], str], ctx: Context) -> Outcome:
    """Run one check and print its line: PASS with what held, FAIL with why, SKIP with why not."""
    start = time.perf_counter()
    try:
        status, detail = "PASS", check(ctx)
    except CheckSkippedError as exc:
        status, detail = "SKIP", str(exc)
    except CheckFailedError as exc:
        status, detail = "FAIL", str(exc)
    except Exception as exc:  # a crash is a failure of this path; the others still run
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        status, detail = "FAIL", f"{type(exc).__name__}: {first}"
    outcome = Outcome(name, status, detail, round(time.perf_counter() - start, 1))
    print(f"{status} {name}: {detail} ({outcome.seconds:.0f} s)", flush=True)
    return outcome


def record_path(records: Path, device: str, partial: bool = False) -> Path:
    """Where the stamp goes: gpu_check_<device>.json, or gpu_check_<device>_partial.json for a run of some paths."""
    return records / f"gpu_check_{slug(device)}{'_partial' if partial else ''}.json"


def carried_over(path: Path, stamp: str) -> dict[str, Outcome]:
    """The paths that passed or were skipped in an unfinished or failed record at `path` with this stamp (a check
    stopped part-way, or failing elsewhere): a later run goes on without them."""
    record = read_json(path)
    if not stamp or not record or record.get("stamp") != stamp:
        return {}
    return {r["path"]: Outcome(**r) for r in record.get("results", []) if r.get("status") in ("PASS", "SKIP")}


def run_checks(ctx: Context, checks, *, records: Path, commit: str, device: str, command: str, stamp: str = "") -> int:
    """The checks in order, the record rewritten after each; 0 when none failed, else 1. `passed` is true only when
    every path of CHECKS ran and none failed; a run of some of them (--only) writes the partial record. A run of
    every path goes on from a record with the same stamp: the paths it passed or skipped are not run again."""
    start, outcomes, partial = time.perf_counter(), [], {n for n, _ in checks} != {n for n, _ in CHECKS}
    earlier = {} if partial else carried_over(record_path(records, device), stamp)
    record = {
        "kind": "gpu_check",
        "device": device,
        "device_type": ctx.device.type,
        "torch": torch.__version__,
        "date": today(),
        "stamp": stamp,
        "commit": commit,
        "command": command,
        "mode": "cpu-smoke" if ctx.smoke else "cuda",
        "tolerances": {"same": ctx.tolerance, "compiled": ctx.compile_tolerance},
    }
    print(f"gpu-check on {device} ({ctx.device.type}, torch {torch.__version__}), commit {commit}", flush=True)
    for name, check in checks:
        if name in earlier:
            outcomes.append(earlier[name])
            print(f"{earlier[name].status} {name}: {earlier[name].detail} (recorded earlier with this stamp)")
            continue
        outcomes.append(run_one(name, check, ctx))
        results = [asdict(o) for o in outcomes]
        write_json(
            record_path(records, device, partial), {**record, "finished": False, "passed": False, "results": results}
        )
    failed = [o.path for o in outcomes if o.status == "FAIL"]
    seconds = round(time.perf_counter() - start, 1)
    final = {**record, "finished": True, "passed": not failed and not partial, "seconds": seconds, "results": results}
    write_json(record_path(records, device, partial), final)
    counts = {s: sum(o.status == s for o in outcomes) for s in ("PASS", "FAIL", "SKIP")}
    which = f" ({', '.join(failed)})" if failed else ""
    print(
        f"gpu-check: {counts['PASS']} passed, {counts['FAIL']} failed{which}, {counts['SKIP']} skipped in "
        f"{seconds:.0f} s; {record_path(records, device, partial)}",
        flush=True,
    )
    return 1 if failed else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu_check.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cpu-smoke", action="store_true", help="run the checks on the CPU with tiny sizes")
    parser.add_argument("--records", default=str(DEFAULT_RECORDS), help="folder of the gpu_check_<device>.json record")
    parser.add_argument("--commit", help="the code commit to write in the record (default: $GPU_COMMIT, else git's)")
    parser.add_argument("--work", help="folder for the runs and exports (default: a temporary one, removed)")
    parser.add_argument("--only", help=f"comma-separated paths to run, among {', '.join(n for n, _ in CHECKS)}")
    return parser


def context(smoke: bool, work: Path) -> Context:
    """The mode's device, sizes and tolerances."""
    device = torch.device("cpu" if smoke else "cuda")
    same, compiled = TOLERANCES[device.type]
    sizes = SMOKE_SIZES if smoke else GPU_SIZES
    return Context(device, smoke, work, sizes, same, compiled, timeout=120 if smoke else 150)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    only = {n.strip() for n in (args.only or "").split(",") if n.strip()}
    if unknown := only - {n for n, _ in CHECKS}:
        parser.error(f"unknown path(s) {', '.join(sorted(unknown))}: use {', '.join(n for n, _ in CHECKS)}")
    if args.cpu_smoke:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before anything asks torch for CUDA: the CPU, also on a GPU machine
        torch.set_num_threads(1)  # tiny models run fastest on one thread, and 2 cores are shared with subprocesses
    elif not torch.cuda.is_available():
        print(
            "gpu-check: no CUDA device here (torch.cuda.is_available() is False), nothing to check; "
            "--cpu-smoke runs the same checks on the CPU"
        )
        return 0
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="gpu_check_"))
    command = shlex.join(["python", "scripts/gpu_check.py", *(sys.argv[1:] if argv is None else argv)])
    device = device_name(cuda=not args.cpu_smoke)
    try:
        checks = [(n, c) for n, c in CHECKS if not only or n in only]
        stamp = step_stamp(CHECK_DEPENDS, device, CHECK_PACKAGES, check_signature(args.cpu_smoke))
        return run_checks(
            context(args.cpu_smoke, work),
            checks,
            records=Path(args.records),
            commit=code_commit(args.commit),
            device=device,
            command=command,
            stamp=stamp,
        )
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
